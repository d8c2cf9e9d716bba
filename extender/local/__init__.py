"""The embedded, no-cluster mode: a small in-memory cluster (store + resource-claim
controller) fed from YAML state directories, and the binder that writes into it.
"""
