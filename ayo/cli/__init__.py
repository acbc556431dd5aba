"""The command line: ``python -m ayo`` (``main.py``) and its commands (``run.py``, ``ingest.py``,
``demo.py``)."""
