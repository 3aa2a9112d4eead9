"""Concurrency slots are taken over in place: a claim updates a slot row whose activity
has finished instead of deleting it and inserting another. No indexed column changes, so with
room on the page the update is HOT (no index entry, the old version pruned by the next access):
runnerq_flow_slots keeps half of each page free for it. The app's own table; other SDKs neither
read nor need it."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("runnerq_django", "0006_console"),
    ]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE runnerq_flow_slots SET (fillfactor = 50)",
            "ALTER TABLE runnerq_flow_slots RESET (fillfactor)",
            elidable=False,
        ),
    ]
