"""A handler the browser test's worker process imports (``runworker --import``)."""

from runnerq_django import activity


@activity(name="AdminBrowserCharge")
def charge(payload):
    return {"charged": payload.get("amount_cents") if isinstance(payload, dict) else None, "by": "runworker"}
