"""The tutorial's shell session, as the reader types it into ``python manage.py shell``
(``tests/docs/test_tutorial.py`` pipes this file into that command)."""

# --8<-- [start:enqueue]
from runnerq_django import enqueue, signal

order = {"order_id": 42, "amount": 1999, "cooling_off_seconds": 3}
handle = enqueue("shop.fulfil_order", order)
print(handle.id)
# --8<-- [end:enqueue]

# --8<-- [start:signal]
signal(handle, "approved", {"by": "ada"})
print(handle.result(timeout=60))
# --8<-- [end:signal]
