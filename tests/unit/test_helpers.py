"""Pure helpers: durations as people read them, stored timestamps, the limits of what a user
may pass, the bound on one backend call, the output tail."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from lockrun.backends.connect import call_timeout_for
from lockrun.config import values
from lockrun.core.clock import human_duration, iso_ago, parse_iso, seconds_since, utc_now_iso
from lockrun.core.errors import UsageError
from lockrun.run.capture import OutputTail


@pytest.mark.parametrize("seconds,text", [
    (None, "-"), (0, "0.0s"), (0.04, "0.0s"), (42, "42.0s"), (59.9, "59.9s"), (60, "1.0m"), (90, "1.5m"),
    (3540, "59.0m"), (3600, "1.0h"), (7560, "2.1h"), (86399, "24.0h"), (86400, "1.0d"), (4 * 86400, "4.0d"),
    (400 * 86400, "400.0d"), (-5, "-5.0s"), (-90, "-1.5m"),
])
def test_human_duration(seconds: float | None, text: str) -> None:
    assert human_duration(seconds) == text


def test_timestamps_are_fixed_width_utc_and_sort_as_text() -> None:
    now = utc_now_iso()
    assert len(now) == 27 and now.endswith("Z") and now[10] == "T"
    earlier = iso_ago(60)
    later = iso_ago(-60)
    assert earlier < now < later
    parsed_now, parsed_earlier = parse_iso(now), parse_iso(earlier)
    assert parsed_now is not None and parsed_earlier is not None
    assert (parsed_now - parsed_earlier).total_seconds() == pytest.approx(60, abs=5)


def test_parse_iso() -> None:
    assert parse_iso("2026-11-29T08:57:03.123456Z") == datetime(2026, 11, 29, 8, 57, 3, 123456, tzinfo=timezone.utc)
    for unusable in (None, "", "2026-11-29T08:57:03.123456", "2026-13-01T00:00:00.000000Z", "yesterday Z", "Z"):
        assert parse_iso(unusable) is None, unusable


def test_seconds_since() -> None:
    now = datetime(2026, 11, 29, 9, 0, 0, tzinfo=timezone.utc)
    assert seconds_since("2026-11-29T08:58:29.500000Z", now) == 90.5
    assert seconds_since("2026-11-29T09:00:10.000000Z", now) == -10.0  # a clock ahead of ours
    assert seconds_since("not a time", now) is None
    assert seconds_since(None, now) is None
    assert seconds_since(iso_ago(30)) == pytest.approx(30, abs=5)
    assert seconds_since((now - timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%S.%fZ"), now) == 172800


@pytest.mark.parametrize("ttl,configured,bound", [
    (30.0, None, 5.0),  # a fifth of the lease, at most 5 s
    (10.0, None, 2.0),
    (1.0, None, 0.2),
    (0.1, None, 0.05),  # at least 50 ms
    (30.0, 0.5, 0.5),  # a configured timeout is used...
    (30.0, 20.0, 10.0),  # ...up to a third of the lease
])
def test_the_bound_on_one_backend_call(ttl: float, configured: float | None, bound: float) -> None:
    assert call_timeout_for(ttl, configured) == pytest.approx(bound)


# -- what a user may pass: the limits, and one line that says them (exit 2) ---------------------------


def test_durations_up_to_the_limit() -> None:
    assert values.parse_duration("36500d", "--since") == 36500 * 86400
    assert values.parse_min_hold("365d", "--min-hold") == 365 * 86400
    for text in ("36501d", "1e9d", "9" * 400 + "d"):
        with pytest.raises(UsageError) as raised:
            values.parse_duration(text, "--since")
        assert raised.value.exit_code == 2  # ExitCode.USAGE
    with pytest.raises(UsageError, match=r"^invalid --min-hold '366d': .* at most 365d$"):
        values.parse_min_hold("366d", "--min-hold")


def test_seconds_up_to_a_year() -> None:
    assert values.parse_seconds("31536000", "--ttl") == 31536000
    with pytest.raises(UsageError, match=r"^invalid --ttl '31536001': expected seconds \(90\) or a number with a unit"
                                         r" s, m, h or d \(90s, 2m, 1.5h, 7d\), more than 0 and at most 365d$"):
        values.parse_seconds("31536001", "--ttl")


@pytest.mark.parametrize("text,size", [("1", 1), ("512", 512), ("10k", 10240), ("10K", 10240), ("1m", 1 << 20),
                                       ("16m", 16 << 20), ("4kb", 4096), ("2k", 2048)])
def test_sizes(text: str, size: int) -> None:
    assert values.parse_size(text, "--capture-tail") == size


@pytest.mark.parametrize("text", ["0", "-1", "17m", "16385k", "1g", "k", "", "1.5k", "99999999999999999999"])
def test_bad_sizes(text: str) -> None:
    with pytest.raises(UsageError, match=r"expected a size like 512, 10k or 1m \(at most 16m\)"):
        values.parse_size(text, "--capture-tail")


@pytest.mark.parametrize("text,replicas", [("0", 0), ("2", 2), ("100", 100), ("all", "all"), ("ALL", "all")])
def test_replicas(text: str, replicas: int | str) -> None:
    assert values.parse_replicas(text, "--replicas") == replicas


@pytest.mark.parametrize("text", ["101", "-1", "1.0", "every", "", "0x1", "1000000", " 2", "٢", " all"])
def test_bad_replicas(text: str) -> None:
    with pytest.raises(UsageError, match="expected a whole number from 0 to 100, or all"):
        values.parse_replicas(text, "--replicas")


# -- the output tail ------------------------------------------------------------------------------


def test_the_tail_keeps_the_last_bytes_in_order() -> None:
    tail = OutputTail(10)
    for chunk in (b"hello ", b"brave ", b"new ", b"world"):
        tail.feed(chunk)
    assert tail.text() == " new world"


def test_the_tail_of_a_single_big_chunk() -> None:
    tail = OutputTail(4)
    tail.feed(b"0123456789")
    assert tail.text() == "6789"


def test_a_tail_cut_inside_a_character_is_still_text() -> None:
    data = "aé€".encode()  # 1 + 2 + 3 bytes
    tail = OutputTail(3)
    tail.feed(data)
    assert tail.text() == "€"
    tail = OutputTail(4)
    tail.feed(data)  # the cut falls inside é: its last byte reads as a replacement character
    assert tail.text() == "\ufffd€"
