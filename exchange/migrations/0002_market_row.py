from django.db import migrations


def create_market_row(apps, schema_editor):
    Market = apps.get_model("exchange", "Market")
    Market.objects.get_or_create(id=1, defaults={"is_open": False})


class Migration(migrations.Migration):
    dependencies = [("exchange", "0001_initial")]

    operations = [migrations.RunPython(create_market_row, migrations.RunPython.noop)]
