"""A second repo, with its own workflow `chase` on its own queue `default`, for sharing one
database with `ops_repo`."""
