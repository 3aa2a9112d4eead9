"""The tutorial's app (docs/tutorial.md): a shop whose orders are fulfilled by a durable workflow.

Its files are included into the tutorial page and run by ``tests/docs/test_tutorial.py``, so the
page shows code that works. It is installed only by ``testproject.tutorial_settings``.
"""
