"""The instance and its wakeup: the vendor's clock rings the app's URL."""

from alarmed_app.clock import alarm, site

from remit import ref

web = site(name="desk")
wake = alarm(app=ref("web", "url"))
