"""The web console: remit's runs, approvals, tasks, ledger, budgets and controls as pages, served
by `remit serve` beside the HTTP API, for the people who decide and answer rather than code.

It reads and acts only through `remit.client.Client`, as the signed-in principal, under the app's
policies, exactly as the API does; it holds no SQL of its own. Pages are rendered on the server
(Jinja2) and every action is a plain form, so all of it works without JavaScript; the vendored
htmx (`static/htmx.min.js`) only makes forms and live updates smoother where it runs.
"""
