"""The HTTP API, served by `remit serve`."""
