"""A daily report on a schedule: ``orchestra serve examples/server/daily_report.yaml`` runs the reporter
every morning at 07:00 Paris time, once, on whichever server of the storage claims the tick.

This script serves that config in this process (on a free port, a temporary storage), shows the schedule
and when it next runs, starts the report now (``orchestra schedules run-now`` does the same) and prints
it. Run it: ``python examples/server/daily_report.py``.
"""

from __future__ import annotations

import socket
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import uvicorn

from orchestra.client import Client
from orchestra.hosting.schedules import Schedule, due
from orchestra.server import create_app, load_config

HERE = Path(__file__).parent


def serve(storage: str) -> tuple[uvicorn.Server, str]:
    config = load_config(HERE / "daily_report.yaml")
    config.storage = storage  # a temporary one, for this demo
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(config), port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.02)
    return server, f"http://127.0.0.1:{port}"


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        server, url = serve(f"file:{folder}/store")
        try:
            with Client(url, "my-secret-key") as client:
                (listed,) = client.schedules()
                schedule = Schedule.model_validate(listed)
                upcoming = due(schedule, datetime.now(UTC)).astimezone(schedule.zone)
                print(
                    f"schedule {schedule.id}: {schedule.cron} ({schedule.timezone}), next at {upcoming:%H:%M %Z}"
                )
                started = client.run_schedule(schedule.id)
                while (run := client.run(started.run_id))["status"] in ("queued", "executing"):
                    time.sleep(0.05)
                print(f"run {run['status']}: {run['output']}")
                print(f"its metadata: {run['metadata']}")
        finally:
            server.should_exit = True


if __name__ == "__main__":
    main()
