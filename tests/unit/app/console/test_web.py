"""The console's times say their zone: stored times are UTC, readers are not."""

from datetime import UTC, datetime, timedelta, timezone

from app.console.web import _when


def test_times_are_shown_in_utc_and_say_so() -> None:
    assert _when("2026-12-02T07:41:15Z") == "2026-12-02 07:41:15 UTC"
    plus_two = timezone(timedelta(hours=2))
    assert _when(datetime(2026, 12, 2, 9, 41, 15, tzinfo=plus_two)) == "2026-12-02 07:41:15 UTC"
    assert _when(datetime(2026, 12, 2, 7, 41, 15, tzinfo=UTC)) == "2026-12-02 07:41:15 UTC"


def test_missing_and_unparsable_times() -> None:
    assert _when(None) == "—"
    assert _when("") == "—"
    assert _when("yesterday") == "yesterday"
