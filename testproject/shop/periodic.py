"""The tutorial's periodic job."""

# --8<-- [start:periodic]
from datetime import timedelta

from runnerq_django import activity, periodic
from runnerq_django.models import Activity


@periodic(id="shop.hourly_report", every=timedelta(hours=1))
@activity(name="shop.hourly_report")
def hourly_report(payload):
    orders = Activity.objects.filter(activity_type="shop.fulfil_order")
    return {"fulfilled_orders": orders.filter(status="completed").count()}


# --8<-- [end:periodic]
