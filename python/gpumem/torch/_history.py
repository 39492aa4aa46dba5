"""The recorder of allocation history with Python stack traces."""
