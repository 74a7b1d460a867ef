"""What the desk runs on, declared: its container, the DNS name that points at it, and its
database. `remit plan` shows what would change to make the vendors match this file; `remit
apply` makes it so, and writes the vendors' ids to remit.lock. Each variable's name is the
resource's: `store`'s URL is stored as the secret REMIT_DATABASE_URL_STORE once it is made."""

from remit import ref, secret, source

from ..connectors.dns import record
from ..connectors.hosting import container
from ..connectors.pgcloud import project

# The desk's worker, served from a container; the mail password is one of remit's secrets
# (`remit secrets set SMTP_PASSWORD`), sent to the host and never written anywhere else. It
# runs the commit of this repo that `main` is at: a merged change deploys its own.
site = container(
    name="ar-desk",
    image="ghcr.io/acme/ar-desk:1.4.0",
    env={"LOG_LEVEL": "info"},
    secret_env={"SMTP_PASSWORD": secret("SMTP_PASSWORD")},
    revision=source("main"),
)

# The desk's address: a CNAME to wherever the host serves the container.
www = record(zone="acme.example", name="desk", type="CNAME", content=ref("site", "url"), ttl=300)

# The desk's database. Its region cannot change in place: moving it is a replace, which apply
# asks a person to approve first, since a database holds data.
store = project(name="ar-desk", region="eu-west-1", size="small")
