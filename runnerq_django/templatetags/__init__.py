"""Template filters of the admin console.

Internal: not part of the public API.
"""
