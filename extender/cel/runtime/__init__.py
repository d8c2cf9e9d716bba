"""What both CEL engines share: Kubernetes value types (semver, IP/CIDR/URL, format), CEL
values, timestamps and durations, conversions, string formatting and the type lattice.

Nothing here knows which engine runs an expression; the engines import from here, never from
each other.
"""
