"""The demo cluster served when no --state is given (package data)."""
