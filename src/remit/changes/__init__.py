"""The change lifecycle: a branch of the operations repo, from change request to deploy."""
