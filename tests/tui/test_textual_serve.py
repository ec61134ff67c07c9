"""`minigpt-tui` served to a browser with textual-serve: the app starts and draws its panes over the websocket."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip("textual_serve", reason="the optional extra minigpt-tui[web]")
aiohttp = pytest.importorskip("aiohttp")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_the_app_starts_under_textual_serve_and_draws_its_tabs(workspace):
    port = _free_port()
    command = f"{sys.executable} -m minigpt_tui --workspace {workspace} --skip-overfit"
    code = f"from textual_serve.server import Server; Server({command!r}, host='127.0.0.1', port={port}).serve()"
    # a session of its own: the server starts the app through a shell, and killing the server alone
    # left the app running after the suite
    server = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        received = asyncio.run(_screen_bytes(port))
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(10)
    assert b"Checks" in received and b"Sampler" in received, received[-400:]


async def _screen_bytes(port: int) -> bytes:
    deadline = time.monotonic() + 60
    async with aiohttp.ClientSession() as session:
        while True:  # the server needs a moment to listen
            try:
                ws = await session.ws_connect(f"http://127.0.0.1:{port}/ws?width=80&height=24")
                break
            except aiohttp.ClientError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
        data = b""
        try:
            while time.monotonic() < deadline and not (b"Checks" in data and b"Sampler" in data):
                try:
                    message = await ws.receive(timeout=5)
                except asyncio.TimeoutError:
                    continue
                if message.type == aiohttp.WSMsgType.BINARY:
                    data += message.data
                elif message.type == aiohttp.WSMsgType.TEXT:
                    data += message.data.encode()
                elif message.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                    break
        finally:
            await ws.close()
        return data
