"""Response compression: Starlette's GZipMiddleware, its deflate done by ISA-L (python-isal).

The middleware is Starlette's as it is (which responses, headers, streaming, Vary); only its compressor
differs: `isal_zlib.compressobj`, the zlib API with ISA-L's deflate, writes the same gzip format. On a
312 kB citation record it takes 0.26 ms against zlib level 1's 1.7 ms, and its output is smaller (40.6 kB
against 44.4 kB); on a 1.2 kB answer 10 us against 72 us (BENCHMARKS.md, "The record's repeated parts made
once, in one statement (sixth pass)"). So cheap, a body of any size the API sends is compressed on the event loop:
a hand-off to a worker thread (Starlette's default from 128 KiB) would cost more than the compression.
Every response that is compressed goes through this one class, in the middleware stack.
"""

from __future__ import annotations

from typing import Any, cast

from isal import isal_zlib
from starlette.middleware.gzip import GZipMiddleware, GZipResponder, IdentityResponder
from starlette.types import Receive, Scope, Send

GZIP_MINIMUM = 1000  # bytes: smaller answers are sent as they are
GZIP_LEVEL = 2  # ISA-L's levels are 0-3; 2 is as fast as 1 and a little smaller, 3 costs four times more
INLINE_MAXIMUM = 64 * 1024 * 1024  # no body the API sends reaches it: never a worker thread
# Of Starlette's default exclusions, the one type the API sends (SSE); each request's responder normalizes
# the list again, and the fourteen defaults cost a lookup more than its gzip decision.
EXCLUDED = ("text/event-stream",)


class _IsalResponder(GZipResponder):
    @property
    def compressor(self) -> Any:
        if self._compressor is None:  # the zlib API: Starlette calls compress and flush on it
            self._compressor = cast(Any, isal_zlib.compressobj(self.compresslevel, isal_zlib.DEFLATED,
                                                               16 + isal_zlib.MAX_WBITS))
        return self._compressor


class GZip(GZipMiddleware):
    """GZipMiddleware whose gzip responses are deflated by ISA-L, on the event loop."""

    def __init__(self, app: Any, minimum_size: int = GZIP_MINIMUM, compresslevel: int = GZIP_LEVEL) -> None:
        super().__init__(app, minimum_size=minimum_size, compresslevel=compresslevel,
                         thread_minimum_size=INLINE_MAXIMUM, exclude_content_types=EXCLUDED)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """As GZipMiddleware decides (its responders), reading Accept-Encoding once from the raw headers."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        responder: IdentityResponder
        if b"gzip" in next((v for k, v in scope["headers"] if k == b"accept-encoding"), b""):
            responder = _IsalResponder(self.app, self.minimum_size, compresslevel=self.compresslevel,
                                       thread_minimum_size=self.thread_minimum_size,
                                       exclude_content_types=self.exclude_content_types)
        else:
            responder = IdentityResponder(self.app, self.minimum_size, exclude_content_types=self.exclude_content_types)
        await responder(scope, receive, send)
