"""An order pipeline that waits for a payment event (docs/waiting.md), on local files.

The first process runs the order until it waits for `payment` and exits: the run is saved waiting. A
payment handler sends the event into the session's inbox (once per key: a retried send is not a second
payment). A waker (a server's sweep does this for hosted runs) answers what can end now and the run goes
on in a new process; `reserve` does not run again.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import anyio

from orchestra import load
from orchestra.inbox import answers_for, session_inbox
from orchestra.storage import storage_from_uri
from orchestra.waits import open_waits

SPEC = Path(__file__).parent.parent / "graphs" / "order_payment.yaml"


async def main() -> None:
    uri = f"file:{tempfile.mkdtemp()}/store"
    first = load(SPEC, session_id="order-7", storage=uri)  # process 1: runs until it waits
    result = await first.invoke_async("order 7: two lamps")
    [wait] = open_waits(result.interrupts)
    print(f"  {result.status.value}: waiting for {wait.describe()}")

    inbox = session_inbox(storage_from_uri(uri), "order-7")  # the payment handler
    payment = {"amount": 42, "currency": "EUR"}
    await inbox.send("payment", payment, key="psp-charge-981")
    await inbox.send("payment", payment, key="psp-charge-981")  # its retry: kept once

    woken = load(SPEC, session_id="order-7", storage=uri)  # process 2: the waker
    answers = await answers_for([wait], inbox)
    blocks = [{"interruptResponse": {"interruptId": i, "response": a}} for i, a in answers.items()]
    done = await woken.invoke_async(blocks)
    print(done.status.value, done.results["ship"].output, done.execution_order)


if __name__ == "__main__":
    anyio.run(main)
