"""The tutorial's activities: each block between the snippet markers is shown on the page."""

# --8<-- [start:activities]
from datetime import timedelta

from runnerq_django import NonRetryableError, activity


@activity(name="shop.charge_card", max_attempts=5)
def charge_card(order):
    if order["amount"] <= 0:
        # Fails at once, never retried:
        raise NonRetryableError("the amount must be positive")
    # A real shop calls its payment provider here, with an idempotency key
    # such as f"order-{order['order_id']}", so a retry never charges twice.
    return {"charge_id": f"ch_{order['order_id']}", "amount": order["amount"]}


@activity(name="shop.ship_order")
def ship_order(order):
    return {"tracking": f"TRACK-{order['order_id']}"}


# --8<-- [end:activities]


# --8<-- [start:workflow]
@activity(name="shop.fulfil_order", timeout=60)
def fulfil_order(ctx, order):
    # 1. A step: charged once, however often the workflow replays.
    charge = ctx.step("charge", charge_card, order)
    # 2. A durable sleep: the cooling-off period (a few seconds here; a real
    #    shop might wait a day).
    ctx.sleep("cooling-off", timedelta(seconds=order["cooling_off_seconds"]))
    # 3. A signal: wait until someone approves the order (from a view, a
    #    shell, a Go or TypeScript service).
    approval = ctx.wait_for_signal("approved", timeout=timedelta(days=3))
    # 4. A child: shipping is an activity of its own, with its own retries.
    shipment = ctx.spawn(ship_order, order, step="ship")
    tracking = ctx.wait(shipment)
    return {"charge": charge, "approved_by": approval["by"], **tracking}


# --8<-- [end:workflow]
