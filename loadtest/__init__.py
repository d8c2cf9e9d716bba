"""Load generator that plays kube-scheduler against a running dra-extender.

Workloads are written as a state directory for `dra-extender serve --state`; the driver then
walks the pending pods through filter → prioritize → bind over HTTP, exactly as one
kube-scheduler instance would, and reports throughput, latency, memory and allocation safety.
"""
