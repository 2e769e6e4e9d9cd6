from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    dependencies = [("postkit", "0001_install")]
    operations = [
        migrations.CreateModel(
            name="Receipt",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("job_id", models.BigIntegerField(unique=True)),
                ("note", models.CharField(default="", max_length=100)),
            ],
        )
    ]
