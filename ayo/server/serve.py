"""Running the server: load, ingest, listen, and shut down cleanly on SIGTERM / SIGINT.

The port opens only after the corpus is ingested (a first start over the full wiki corpus
takes minutes; the log says so), so every request the server answers sees the whole corpus.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal

from aiohttp import web

from ayo.server.app import create_app
from ayo.server.config import ServerConfig
from ayo.server.lifecycle import build_state, close_state, ensure_corpus, ensure_engine_profiles

log = logging.getLogger(__name__)


async def start_site(
    app: web.Application, host: str, port: int, shutdown_timeout: float = 10.0
) -> tuple[web.AppRunner, int]:
    """Listen on ``host:port`` (0: a free port); returns the runner and the bound port. A client
    that disconnects cancels its handler (and so its query); at shutdown, handlers still running
    after ``shutdown_timeout`` seconds are cancelled."""
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=shutdown_timeout)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = port
    for sock in getattr(site._server, "sockets", None) or []:  # the port port=0 picked
        bound = sock.getsockname()[1]
        break
    return runner, bound


async def drain(runner: web.AppRunner, state, timeout: float) -> None:
    """Stop listening, give the requests in flight ``timeout`` seconds, then cancel the rest
    (their clients see the connection close; an ingest they started is cancelled after)."""
    for site in list(runner.sites):
        await site.stop()
    pending = set(state.handlers)
    if pending:
        log.info("waiting up to %.0f s for %d request(s) in flight", timeout, len(pending))
        _, pending = await asyncio.wait(pending, timeout=timeout)
    for task in pending:
        task.cancel()
    if pending:
        log.info("cancelled %d request(s) still running", len(pending))
        await asyncio.wait(pending, timeout=2.0)


async def cancel_ingests(state) -> None:
    """Cancel the ingests still running: none was acknowledged, so nothing acknowledged is
    lost; an ingest inside its commit finishes it (the store's lock waits for it)."""
    tasks = list(state.ingests)
    for task in tasks:
        task.cancel()
    if tasks:
        log.info("cancelled %d ingest(s) not yet acknowledged", len(tasks))
        await asyncio.gather(*tasks, return_exceptions=True)


async def serve(config: ServerConfig) -> None:
    """Load everything, ingest what is missing, listen until SIGTERM/SIGINT, then close the
    engines and persist the store."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    state = await build_state(config)
    runner = None
    try:
        log.info("ingesting the corpus before opening the port (first start only takes long)")
        await ensure_corpus(state, stop=stop)
        if stop.is_set():
            return
        if config.profile_engines:
            await ensure_engine_profiles(state)
        if config.gc_tuning:
            from ayo.scheduler.runtime.serving_gc import configure_gc_for_serving

            configure_gc_for_serving()
        runner, port = await start_site(
            create_app(state), config.host, config.port, config.shutdown_timeout_s
        )
        auth = "API key required" if config.api_key else "no API key"
        log.info(
            "listening on http://%s:%d (%s); data in %s", config.host, port, auth, config.data_path
        )
        await stop.wait()
        log.info("shutting down")
    finally:
        if runner is not None:
            await drain(runner, state, config.shutdown_timeout_s)
            await runner.cleanup()
        await cancel_ingests(state)
        await close_state(state)
        if config.gc_tuning:
            # Give the frozen startup heap back to the collector: left frozen, the objects it
            # holds outlive interpreter shutdown and triton's nanobind reports them as leaks.
            from ayo.scheduler.runtime.serving_gc import restore_gc

            restore_gc()
            gc.collect()
