"""Server configuration for the Galata tests (a throwaway root, no token)."""

from jupyterlab.galata import configure_jupyter_server

configure_jupyter_server(c)  # noqa: F821

# Never open a browser from the server; Playwright drives Chromium.
c.ServerApp.open_browser = False  # noqa: F821
c.ServerApp.allow_root = True  # noqa: F821  (CI runs as root)

# The run record (issue #24) of the test notebooks goes to a throwaway folder, never the
# user's Jupyter data folder.
import os  # noqa: E402
import tempfile  # noqa: E402

os.environ.setdefault("TORCHDBG_RECORD_DIR", tempfile.mkdtemp(prefix="torchdbg-records-"))
