"""Kernel-side code. Imported only inside a kernel (by ``%load_ext``), never by the server."""
