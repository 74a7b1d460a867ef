"""`remit init`: a new repo, or a new app in a repo, from the templates in `templates/`."""
