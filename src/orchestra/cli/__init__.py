"""The ``orchestra`` command: run, resume, validate and draw pipelines; look after sessions.

Exit codes: 0 completed; 1 failed run, invalid spec or failed command; 2 bad command line; 3 waiting for
a human (interrupt); 130 SIGINT and 143 SIGTERM (the run is saved as interrupted). See docs/cli.md.
"""

from orchestra.cli._app import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, app, main

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "app", "main"]
