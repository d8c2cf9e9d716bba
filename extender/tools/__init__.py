"""Developer tools run with ``python -m``: the allocation conformance runner and the CEL
parity runner. They use the service's rooms but nothing in the service imports them.
"""
