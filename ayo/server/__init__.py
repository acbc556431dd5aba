"""Ayo's HTTP server (aiohttp): ``python -m ayo.server``.

- :mod:`ayo.server.app`: ``create_app(state)``, the middlewares and routes;
- :mod:`ayo.server.state`: ``ServerState`` (runtime, engines, store, config), ``STATE``;
- :mod:`ayo.server.lifecycle`: loading engines, ingesting the corpus, closing;
- :mod:`ayo.server.serve`: listening and graceful shutdown; ``__main__``: the command line.
"""
