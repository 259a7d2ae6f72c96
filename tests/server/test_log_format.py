"""Log lines a client cannot forge or inflate: the message part of a record is one line, cut to
MAX_MESSAGE_CHARS; a traceback keeps its lines."""

from __future__ import annotations

import logging

from asr_server.log_format import MAX_MESSAGE_CHARS, OneLineFormatter, one_line


def record(msg, *args, exc_info=None) -> logging.LogRecord:
    return logging.LogRecord("asr_server", logging.INFO, __file__, 1, msg, args, exc_info)


def test_a_newline_in_a_client_string_cannot_start_a_line():
    fmt = OneLineFormatter("%(levelname)s %(message)s")
    line = fmt.format(record("unknown model '%s'", "m\n2026-12-06 E asr_server] forged\x1b[2J"))
    assert "\n" not in line and "\x1b" not in line
    assert line == "INFO unknown model 'm\\n2026-12-06 E asr_server] forged\\x1b[2J'"


def test_a_huge_client_string_is_cut():
    line = OneLineFormatter("%(message)s").format(record("model %s", "x" * (4 << 20)))
    assert len(line) < MAX_MESSAGE_CHARS + 50 and line.endswith(f"({6 + (4 << 20) - MAX_MESSAGE_CHARS} more characters)")
    assert one_line("plain text") == "plain text"


def test_a_traceback_keeps_its_lines():
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        import sys

        text = OneLineFormatter("%(message)s").format(record("failed: %s", "a\nb", exc_info=sys.exc_info()))
    first, *rest = text.split("\n")
    assert first == "failed: a\\nb" and rest[0].startswith("Traceback") and "RuntimeError: boom" in rest[-1]
