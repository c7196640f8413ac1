"""Without the protocol packages the server still starts: the doors are not mounted and nothing of them is
imported; the client-side A2A tool says which extra to install."""

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

SCRIPT = textwrap.dedent(
    """
    import sys
    for blocked in ("a2a", "ag_ui", "mcp"):
        sys.modules[blocked] = None  # as if not installed: importing it raises ImportError
    from pathlib import Path
    from tests.server.conftest import write_config
    from orchestra.server import create_app, load_config

    root = Path(sys.argv[1])
    app = create_app(load_config(write_config(root, f"file:{root}/store")))
    paths = {getattr(route, "path", "") for route in app.routes}
    assert not {"/mcp", "/a2a", "/ag-ui/{agent_id}"} & paths, paths
    assert "/api/v1/agents/{agent_id}/invoke" in paths
    loaded = [name for name in sys.modules if name.split(".")[0] in ("a2a", "ag_ui", "mcp") and sys.modules[name]]
    assert not loaded, loaded
    from orchestra.errors import ConfigurationError
    from orchestra.tools.a2a import a2a_tool
    try:
        a2a_tool("http://127.0.0.1:9")
    except ConfigurationError as exc:
        assert "pip install 'orchestra-agents[a2a]'" in str(exc), exc
    else:
        raise AssertionError("a2a_tool without the SDK did not say what to install")
    print("ok")
    """
)


def test_the_server_starts_without_the_protocol_packages(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
