"""The telemetry settings, and what a JSON log line holds."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider

from remit import Settings, SettingsError
from remit.core.telemetry import JsonFormatter


def endpoint(tmp_path: Path, **environ: str) -> str | None:
    return Settings.from_env(tmp_path, environ=environ).otlp_endpoint


def test_nothing_is_exported_and_logs_are_text_by_default(tmp_path: Path) -> None:
    settings = Settings.from_env(tmp_path, environ={})

    assert settings.otlp_endpoint is None
    assert settings.log_format == "text"


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"REMIT_OTLP_ENDPOINT": "http://localhost:4318"}, "http://localhost:4318/v1/traces"),
        (
            {"REMIT_OTLP_ENDPOINT": "https://otel.example.com/"},
            "https://otel.example.com/v1/traces",
        ),
        (
            {"REMIT_OTLP_ENDPOINT": "http://collector:4318/v1/traces"},
            "http://collector:4318/v1/traces",
        ),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"},
            "http://collector:4318/v1/traces",
        ),
        (
            {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/custom"},
            "http://collector:4318/custom",
        ),
        (
            {
                "REMIT_OTLP_ENDPOINT": "http://mine:4318",
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://theirs:4318",
            },
            "http://mine:4318/v1/traces",
        ),
        (
            {
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://traces:4318/v1/traces",
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://all:4318",
            },
            "http://traces:4318/v1/traces",
        ),
    ],
)
def test_where_traces_go(tmp_path: Path, environ: dict[str, str], expected: str) -> None:
    assert endpoint(tmp_path, **environ) == expected


@pytest.mark.parametrize(
    "raw", ["localhost:4318", "grpc://collector:4317", "http://", "http://h:x"]
)
def test_a_malformed_endpoint_is_refused_naming_the_setting(tmp_path: Path, raw: str) -> None:
    with pytest.raises(SettingsError) as raised:
        endpoint(tmp_path, REMIT_OTLP_ENDPOINT=raw)

    assert str(raised.value) == (
        f"REMIT_OTLP_ENDPOINT={raw!r} is not the URL of an OTLP/HTTP collector: give http:// or "
        "https://, a host and a port, e.g. http://localhost:4318 (traces go to its /v1/traces)"
    )


def test_the_log_format(tmp_path: Path) -> None:
    assert Settings.from_env(tmp_path, environ={"REMIT_LOG_FORMAT": "JSON"}).log_format == "json"
    with pytest.raises(SettingsError, match="REMIT_LOG_FORMAT='xml' is not a log format"):
        Settings.from_env(tmp_path, environ={"REMIT_LOG_FORMAT": "xml"})


def record(message: str, *args: object, exc_info: bool = False) -> logging.LogRecord:
    return logging.LogRecord(
        "remit.calls",
        logging.WARNING,
        __file__,
        1,
        message,
        args,
        sys.exc_info() if exc_info else None,
    )


def test_a_json_line_has_the_message_and_the_current_span() -> None:
    tracer = TracerProvider().get_tracer("test")

    with tracer.start_as_current_span("work") as span:
        line = json.loads(JsonFormatter().format(record("%s failed; trying again", "op")))

    context = span.get_span_context()
    assert line["level"] == "WARNING"
    assert line["logger"] == "remit.calls"
    assert line["message"] == "op failed; trying again"
    assert line["trace_id"] == f"{context.trace_id:032x}"
    assert line["span_id"] == f"{context.span_id:016x}"
    assert "run_id" not in line


def test_a_json_line_outside_a_span_has_no_ids_and_keeps_a_traceback() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        text = JsonFormatter().format(record("it broke", exc_info=True))

    assert "\n" not in text
    line = json.loads(text)
    assert "trace_id" not in line
    assert line["message"] == "it broke"
    assert "ValueError: boom" in line["error"]
