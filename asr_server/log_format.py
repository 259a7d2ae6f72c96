"""The server's log line format: one line per record, whatever a client put into it.

Model names, sequence ids and request ids come from clients and are logged. Unescaped, a newline in one forges
a second log line (an ERROR of the attacker's choosing), and a 4 MiB name writes 4 MiB per line. The message
part of every record is therefore cut to MAX_MESSAGE_CHARS and its control characters escaped; a traceback
appended by ``logger.exception`` keeps its lines.
"""

from __future__ import annotations

import logging
import re

MAX_MESSAGE_CHARS = 4096
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def one_line(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` with control characters escaped (\\n, \\x1b, ...) and cut to ``limit`` characters."""
    if len(text) > limit:
        text = f"{text[:limit]}... ({len(text) - limit} more characters)"
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


class OneLineFormatter(logging.Formatter):
    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        record.message = one_line(record.message)
        return super().formatMessage(record)
