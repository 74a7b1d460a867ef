from change_app.connectors.host import app_host
from remit import source

web = app_host(name="shop-web", revision=source("main"))
