"""Everything that talks to a real Kubernetes API server: the client, the list+watch
source that feeds the cache, the binder that writes claim status and Bindings, leader
election and events. No other room imports the ``kubernetes`` package.
"""
