"""The compact fleet record's layout (backends/redis/record_format.py): what the release script
stores reads back as the row it was given; what someone else stored reads as a strange run."""

from __future__ import annotations

from lockrun.backends.redis.record_format import EVENT_FIELDS, decode_event, decode_open, event_pairs, is_compact
from lockrun.core.record import row_from_fields

ROW = {"run_id": "9c1e0b3a" * 4, "status": "failed", "exit_code": 3, "signal": None, "host": "app-2", "pid": 4242,
       "command": ["sh", "-c", "exit 3"], "started_at": "2026-12-01T02:00:00.123456Z",
       "ended_at": "2026-12-01T02:00:41.323456Z", "duration_s": 41.2, "fencing_token": 1764554400123456,
       "once_key": "pay-2026-12-01", "error": None, "note": None, "exit_status": 3, "waited_s": 1.5,
       "lock_lost_at_release": None}


def _as_stored(pairs: list[str], vals: dict[str, str]) -> dict[bytes, bytes]:
    """What the script stores: host and command swapped for their numbers, k filled in."""
    fields = dict(zip(pairs[0::2], pairs[1::2], strict=True))
    for kind in ("h", "c"):
        fields[kind] = vals.setdefault(kind + fields[kind], str(len(vals) + 1))
    fields["k"] = "41200"
    return {key.encode(): value.encode() for key, value in fields.items()}


def test_a_row_reads_back_as_it_was_written() -> None:
    vals: dict[str, str] = {}
    stored = _as_stored(event_pairs(ROW), vals)
    assert is_compact(stored) and [key.decode() for key in stored] == [field for field, _ in EVENT_FIELDS]
    by_number = {number: (key[0], key[1:]) for key, number in vals.items()}
    fields = decode_event("1764554441323-0", stored, by_number)
    assert fields["start_ms"] == str(1764554441323 - 41200)
    row = row_from_fields("pay", fields)
    assert {k: row[k] for k in ROW} == ROW


def test_values_past_the_dictionary_and_odd_times_are_kept_inline() -> None:
    row = {**ROW, "started_at": "yesterday", "ended_at": None}
    fields = dict(zip(event_pairs(row)[0::2], event_pairs(row)[1::2], strict=True))
    fields["h"], fields["c"] = "=app-9", '=["x"]'
    decoded = decode_event("5-0", fields, {})
    assert (decoded["host"], decoded["command"], decoded["started_at"]) == ("app-9", '["x"]', "yesterday")
    assert "ended_at" not in decoded and "start_ms" not in decoded  # no k: placed by its started_at


def test_entries_someone_else_wrote_read_as_strange_runs() -> None:
    garbage = {b"r": b"x", b"h": b"99", b"c": b"1", b"t": b"\xff", b"e": b"12", b"d": b"nan", b"k": b"-5"}
    decoded = decode_event("not-an-id", garbage, {"1": ("h", "a host, not a command")})
    row = row_from_fields("odd", decoded)
    assert row["run_id"] == "x" and row["host"] is None and row["command"] == [] and row["duration_s"] is None
    assert not is_compact({b"event": b"end", b"run_id": b"x"})  # another layout: no run of lockrun's
    assert decode_open("r", "no spaces") is None and decode_open("r", "12 34 [1]") is None
    assert decode_open("r", '12 34 {"host": "h", "pid": 7}') == ("12-0", {
        "host": "h", "event": "start", "run_id": "r", "fencing_token": "34"})
