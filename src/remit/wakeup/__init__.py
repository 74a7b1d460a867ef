"""The wakeup service (`remit wakeup serve`): it calls a stopped instance's `GET /wake` at the
time the instance registered before it stopped itself. Its own server and its own database."""
