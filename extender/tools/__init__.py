"""Tools around the service: ``simulate`` (a CLI subcommand), and the allocation conformance
and CEL parity runners run with ``python -m``. They use the service's rooms but nothing in the
service imports them.
"""
