"""When an HTTP request of ours is tried again, and how long to wait first: one policy for every client
(SGLangEngine, OpenAIChatEngine, RetrievalClient), plus the engines' request timeouts.

A 5xx, a 408 (a proxy gave up waiting) or a 429 (a full router or server) says "try again later"; any other
4xx says the request itself is wrong, and no retry can fix it. The wait before attempt n (n >= 1) doubles from
`backoff_s`, stops growing at `backoff_cap_s` (a server that stays down is asked again at a steady pace, not
after minutes), and is jittered down to half so that many workers do not retry in lockstep.

>>> [retryable_status(s) for s in (503, 429, 408, 404, 400)]
[True, True, True, False, False]
>>> rng = random.Random(0)
>>> [round(backoff_delay(n, 0.5, 8.0, rng), 2) for n in (1, 2, 3, 4, 5, 6)]  # of 0.5, 1, 2, 4, 8, 8
[0.46, 0.88, 1.42, 2.52, 6.05, 5.62]
"""

from __future__ import annotations

import random

import httpx

__all__ = ["DEFAULT_BACKOFF_CAP_S", "ENGINE_TIMEOUT", "TRANSIENT_4XX", "backoff_delay", "retryable_status"]

# Generation can legitimately take minutes (long outputs, a busy server), so the read timeout is
# long; a server that does not even accept the connection within seconds is down.
ENGINE_TIMEOUT = httpx.Timeout(connect=5.0, read=600.0, write=30.0, pool=600.0)
# 4xx statuses that mean "try again later" rather than "this body is wrong": a router that is
# full answers 429, a proxy that gave up waiting answers 408.
TRANSIENT_4XX = frozenset({408, 429})
DEFAULT_BACKOFF_CAP_S = 8.0


def retryable_status(status_code: int) -> bool:
    """Whether an answer with this status is worth another attempt (5xx, 408, 429)."""
    return status_code >= 500 or status_code in TRANSIENT_4XX


def backoff_delay(attempt: int, backoff_s: float, backoff_cap_s: float, rng: random.Random) -> float:
    """Seconds to wait before retry `attempt` (1 for the first retry): exponential, capped, with jitter in
    [50 %, 100 %]. `rng` is the client's own (no global random state)."""
    delay = min(backoff_cap_s, backoff_s * (2 ** (attempt - 1)))
    return delay * (0.5 + 0.5 * rng.random())
