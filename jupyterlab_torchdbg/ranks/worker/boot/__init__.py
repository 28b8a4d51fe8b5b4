"""The boot directory put on PYTHONPATH for the processes the notebook starts: only its
``sitecustomize`` matters there (this file makes it a package for tools and tests)."""
