"""Each book's summary (its best ask and the GPUs on offer) kept by PostgreSQL (issue 17).

The public pages showed the lowest ask of every GPU model by aggregating every active offer and its
server on each render. Now the database keeps the answer in `exchange_marketbook`, whoever writes:

- After each statement that inserts, updates or deletes offers, or updates servers, a
  statement-level trigger reads the rows it changed (transition tables), finds the GPU models they
  belong to (only those whose status, GPUs, rented GPUs, verification or model changed, for
  servers), and recomputes the summary of each: one aggregate over that model's offers.
- It takes the model's market lock first (the same advisory lock as `exchange.matching.
  market_lock`, in the order of the ids), so two writers of one book recompute one after the
  other, the second seeing the first's committed rows. The services hold that lock already.

What the summary counts is what `exchange.selectors.offers_available` counts: active offers of
active servers their agent verified, with GPUs free. On SQLite nothing happens: the embedded
default aggregates as before.
"""

from django.db import migrations, models

MARKET_LOCK_NAMESPACE = 0x45584D  # exchange.matching.MARKET_LOCK_NAMESPACE when this was written

FORWARD = f"""
CREATE FUNCTION exchange_book_summaries_refresh(models bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    model bigint;
BEGIN
    FOR model IN SELECT DISTINCT m FROM unnest(models) AS m WHERE m IS NOT NULL ORDER BY m LOOP
        PERFORM pg_advisory_xact_lock({MARKET_LOCK_NAMESPACE}, model::integer);
    END LOOP;
    INSERT INTO exchange_marketbook (gpu_model_id, version, best_ask_usd, gpus_on_offer)
    SELECT g.id, 0, a.lowest, coalesce(a.gpus, 0)
    FROM catalog_gpumodel g
    LEFT JOIN LATERAL (
        SELECT min(o.price_usd) AS lowest,
               sum(least(o.gpus_offered, s.gpu_count) - s.gpus_rented) AS gpus
        FROM sellers_server s JOIN exchange_offer o ON o.server_id = s.id
        WHERE s.gpu_model_id = g.id AND s.status = 'active' AND s.agent_verified_at IS NOT NULL
          AND o.state = 'active' AND least(o.gpus_offered, s.gpu_count) > s.gpus_rented
    ) a ON true
    WHERE g.id = ANY(models)
    ON CONFLICT (gpu_model_id) DO UPDATE
        SET best_ask_usd = EXCLUDED.best_ask_usd, gpus_on_offer = EXCLUDED.gpus_on_offer
        WHERE exchange_marketbook.best_ask_usd IS DISTINCT FROM EXCLUDED.best_ask_usd
           OR exchange_marketbook.gpus_on_offer <> EXCLUDED.gpus_on_offer;
END;
$$;

CREATE FUNCTION exchange_offer_books_summarise() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    models bigint[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(DISTINCT s.gpu_model_id) INTO models
        FROM changed_new c JOIN sellers_server s ON s.id = c.server_id;
    ELSIF TG_OP = 'UPDATE' THEN
        SELECT array_agg(DISTINCT s.gpu_model_id) INTO models
        FROM (SELECT server_id FROM changed_new UNION SELECT server_id FROM changed_old) c
        JOIN sellers_server s ON s.id = c.server_id;
    ELSE
        SELECT array_agg(DISTINCT s.gpu_model_id) INTO models
        FROM changed_old c JOIN sellers_server s ON s.id = c.server_id;
    END IF;
    IF models IS NOT NULL THEN
        PERFORM exchange_book_summaries_refresh(models);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER exchange_offer_books_after_insert AFTER INSERT ON exchange_offer
    REFERENCING NEW TABLE AS changed_new
    FOR EACH STATEMENT EXECUTE FUNCTION exchange_offer_books_summarise();
CREATE TRIGGER exchange_offer_books_after_update AFTER UPDATE ON exchange_offer
    REFERENCING OLD TABLE AS changed_old NEW TABLE AS changed_new
    FOR EACH STATEMENT EXECUTE FUNCTION exchange_offer_books_summarise();
CREATE TRIGGER exchange_offer_books_after_delete AFTER DELETE ON exchange_offer
    REFERENCING OLD TABLE AS changed_old
    FOR EACH STATEMENT EXECUTE FUNCTION exchange_offer_books_summarise();

CREATE FUNCTION exchange_server_books_summarise() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    models bigint[];
BEGIN
    -- Only what the summary counts: a new reliability or heartbeat changes no book.
    SELECT array_agg(DISTINCT m) INTO models
    FROM changed_old o JOIN changed_new n ON n.id = o.id,
         LATERAL (VALUES (o.gpu_model_id), (n.gpu_model_id)) AS v(m)
    WHERE (o.status, o.gpu_count, o.gpus_rented, o.agent_verified_at IS NULL, o.gpu_model_id)
          IS DISTINCT FROM (n.status, n.gpu_count, n.gpus_rented, n.agent_verified_at IS NULL, n.gpu_model_id);
    IF models IS NOT NULL THEN
        PERFORM exchange_book_summaries_refresh(models);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER exchange_server_books_after_update AFTER UPDATE ON sellers_server
    REFERENCING OLD TABLE AS changed_old NEW TABLE AS changed_new
    FOR EACH STATEMENT EXECUTE FUNCTION exchange_server_books_summarise();

-- The books as they are now.
SELECT exchange_book_summaries_refresh(array_agg(id)) FROM catalog_gpumodel;
"""

REVERSE = """
DROP TRIGGER IF EXISTS exchange_server_books_after_update ON sellers_server;
DROP FUNCTION IF EXISTS exchange_server_books_summarise();
DROP TRIGGER IF EXISTS exchange_offer_books_after_insert ON exchange_offer;
DROP TRIGGER IF EXISTS exchange_offer_books_after_update ON exchange_offer;
DROP TRIGGER IF EXISTS exchange_offer_books_after_delete ON exchange_offer;
DROP FUNCTION IF EXISTS exchange_offer_books_summarise();
DROP FUNCTION IF EXISTS exchange_book_summaries_refresh(bigint[]);
"""


def install(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FORWARD, params=None)


def uninstall(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(REVERSE, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("exchange", "0008_host_agent"),
        ("sellers", "0010_heartbeat_updates_in_place"),
    ]

    operations = [
        migrations.AddField(
            model_name="marketbook",
            name="best_ask_usd",
            field=models.DecimalField(
                blank=True, decimal_places=2, max_digits=8, null=True,
                verbose_name="best ask (USD per GPU-hour)",
            ),
        ),
        migrations.AddField(
            model_name="marketbook",
            name="gpus_on_offer",
            field=models.PositiveIntegerField(db_default=0, verbose_name="GPUs on offer"),
        ),
        migrations.RunPython(install, uninstall, elidable=False),
    ]
