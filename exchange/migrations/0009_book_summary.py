"""Each book's best ask and GPUs on offer, kept by differences in the writer's transaction (issue 17).

The public pages showed the lowest ask of every GPU model by aggregating every active offer and its
server on each render. Now `exchange_marketbook` holds both figures, and PostgreSQL keeps them
whoever writes, in the writer's own transaction.

An earlier version recomputed the aggregate after every statement that touched offers or servers,
and made matching four times slower on a deep book (BENCHMARKS.md, "Third slice"). This one works
by differences: each offer or server row that changes moves the book by what that one row
changes, so a write costs the same whatever the depth of the book.

- What an offer contributes is what `exchange.selectors.offers_available` counts: the free GPUs
  (`least(gpus_offered, gpu_count) - gpus_rented`, never below zero) of an active offer of an
  active server its agent verified; nothing otherwise. A server has at most one active offer.
- After each row of `exchange_offer` (insert, update, delete) and each update of a server that
  changes what it contributes (status, GPU count, GPUs rented, verification, GPU model), a row
  trigger adds the difference to `gpus_on_offer`. The best ask becomes the lower of itself and the
  row's price when the row now contributes; it is looked up again (the cheapest contributing
  offer, through the index of active offers) only when the row that held it stops contributing or
  gets dearer.
- The trigger takes the model's market lock first (the advisory lock of `exchange.matching.
  market_lock`, which every service holds already, so it waits for nothing there), then reads the
  other table's row in a statement of its own: it sees every difference committed before, so two
  writers of one book can never each add a difference computed from the other's old row.

On SQLite nothing happens: the embedded default aggregates as before.
"""

from django.db import migrations, models

MARKET_LOCK_NAMESPACE = 0x45584D  # exchange.matching.MARKET_LOCK_NAMESPACE when this was written

FORWARD = f"""
CREATE FUNCTION exchange_book_share(
    offer_state text, gpus_offered integer, server_status text, verified boolean,
    gpu_count integer, gpus_rented integer
) RETURNS integer LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN offer_state = 'active' AND server_status = 'active' AND verified
                THEN greatest(least(gpus_offered, gpu_count) - gpus_rented, 0) ELSE 0 END
$$;

CREATE FUNCTION exchange_book_best_ask(model bigint) RETURNS numeric
LANGUAGE sql STABLE AS $$
    SELECT o.price_usd FROM exchange_offer o JOIN sellers_server s ON s.id = o.server_id
    WHERE o.state = 'active' AND s.gpu_model_id = model AND s.status = 'active'
      AND s.agent_verified_at IS NOT NULL AND least(o.gpus_offered, s.gpu_count) > s.gpus_rented
    ORDER BY o.price_usd LIMIT 1
$$;

CREATE FUNCTION exchange_book_lock(first bigint, second bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF first IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock({MARKET_LOCK_NAMESPACE}, least(first, coalesce(second, first))::integer);
    END IF;
    IF second IS NOT NULL AND second IS DISTINCT FROM first THEN
        PERFORM pg_advisory_xact_lock({MARKET_LOCK_NAMESPACE}, greatest(first, second)::integer);
    END IF;
END;
$$;

-- One book moves by `gpus`; `added`: a price that now contributes; `removed`: a price that
-- contributed and no longer does (or only at a higher price).
CREATE FUNCTION exchange_book_move(model bigint, gpus integer, added numeric, removed numeric)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF model IS NULL OR (gpus = 0 AND added IS NULL AND removed IS NULL) THEN
        RETURN;
    END IF;
    INSERT INTO exchange_marketbook AS b (gpu_model_id, version, best_ask_usd, gpus_on_offer)
    VALUES (model, 0, added, greatest(gpus, 0))
    ON CONFLICT (gpu_model_id) DO UPDATE SET
        gpus_on_offer = b.gpus_on_offer + gpus,
        best_ask_usd = CASE WHEN removed IS NOT NULL AND b.best_ask_usd >= removed
                            THEN exchange_book_best_ask(model)
                            ELSE least(b.best_ask_usd, added) END
    WHERE gpus <> 0 OR (removed IS NOT NULL AND b.best_ask_usd >= removed)
       OR b.best_ask_usd IS NULL OR b.best_ask_usd > added;
END;
$$;

CREATE FUNCTION exchange_offer_book_move() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    old_model bigint;
    new_model bigint;
    server record;
    old_share integer := 0;
    new_share integer := 0;
BEGIN
    IF TG_OP <> 'INSERT' THEN
        SELECT gpu_model_id INTO old_model FROM sellers_server WHERE id = OLD.server_id;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        SELECT gpu_model_id INTO new_model FROM sellers_server WHERE id = NEW.server_id;
    END IF;
    PERFORM exchange_book_lock(coalesce(old_model, new_model), coalesce(new_model, old_model));
    IF TG_OP <> 'INSERT' THEN
        SELECT * INTO server FROM sellers_server WHERE id = OLD.server_id;
        old_share := exchange_book_share(OLD.state, OLD.gpus_offered, server.status,
            server.agent_verified_at IS NOT NULL, server.gpu_count, server.gpus_rented);
    END IF;
    IF TG_OP <> 'DELETE' THEN
        SELECT * INTO server FROM sellers_server WHERE id = NEW.server_id;
        new_share := exchange_book_share(NEW.state, NEW.gpus_offered, server.status,
            server.agent_verified_at IS NOT NULL, server.gpu_count, server.gpus_rented);
    END IF;
    IF old_model IS NOT DISTINCT FROM new_model THEN
        PERFORM exchange_book_move(new_model, new_share - old_share,
            CASE WHEN new_share > 0 THEN NEW.price_usd END,
            CASE WHEN old_share > 0 AND (new_share = 0 OR NEW.price_usd > OLD.price_usd)
                 THEN OLD.price_usd END);
    ELSE
        PERFORM exchange_book_move(old_model, -old_share, NULL,
            CASE WHEN old_share > 0 THEN OLD.price_usd END);
        PERFORM exchange_book_move(new_model, new_share,
            CASE WHEN new_share > 0 THEN NEW.price_usd END, NULL);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER exchange_offer_book_move
    AFTER INSERT OR DELETE ON exchange_offer
    FOR EACH ROW EXECUTE FUNCTION exchange_offer_book_move();
CREATE TRIGGER exchange_offer_book_move_on_update
    AFTER UPDATE ON exchange_offer
    FOR EACH ROW
    WHEN ((OLD.state, OLD.gpus_offered, OLD.price_usd, OLD.server_id)
          IS DISTINCT FROM (NEW.state, NEW.gpus_offered, NEW.price_usd, NEW.server_id))
    EXECUTE FUNCTION exchange_offer_book_move();

CREATE FUNCTION exchange_server_book_move() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    offer record;
    old_share integer;
    new_share integer;
BEGIN
    PERFORM exchange_book_lock(OLD.gpu_model_id, NEW.gpu_model_id);
    SELECT state, gpus_offered, price_usd INTO offer
    FROM exchange_offer WHERE server_id = NEW.id AND state = 'active';
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    old_share := exchange_book_share(offer.state, offer.gpus_offered, OLD.status,
        OLD.agent_verified_at IS NOT NULL, OLD.gpu_count, OLD.gpus_rented);
    new_share := exchange_book_share(offer.state, offer.gpus_offered, NEW.status,
        NEW.agent_verified_at IS NOT NULL, NEW.gpu_count, NEW.gpus_rented);
    IF OLD.gpu_model_id = NEW.gpu_model_id THEN
        PERFORM exchange_book_move(NEW.gpu_model_id, new_share - old_share,
            CASE WHEN new_share > 0 THEN offer.price_usd END,
            CASE WHEN old_share > 0 AND new_share = 0 THEN offer.price_usd END);
    ELSE
        PERFORM exchange_book_move(OLD.gpu_model_id, -old_share, NULL,
            CASE WHEN old_share > 0 THEN offer.price_usd END);
        PERFORM exchange_book_move(NEW.gpu_model_id, new_share,
            CASE WHEN new_share > 0 THEN offer.price_usd END, NULL);
    END IF;
    RETURN NULL;
END;
$$;

-- Only what a book counts: a heartbeat, a reliability score or a new name moves no book.
CREATE TRIGGER exchange_server_book_move
    AFTER UPDATE ON sellers_server
    FOR EACH ROW
    WHEN ((OLD.status, OLD.gpu_count, OLD.gpus_rented, OLD.agent_verified_at IS NULL, OLD.gpu_model_id)
          IS DISTINCT FROM (NEW.status, NEW.gpu_count, NEW.gpus_rented, NEW.agent_verified_at IS NULL,
                            NEW.gpu_model_id))
    EXECUTE FUNCTION exchange_server_book_move();

-- The books as they are now, every GPU model with a row.
INSERT INTO exchange_marketbook AS b (gpu_model_id, version, best_ask_usd, gpus_on_offer)
SELECT g.id, 0, a.lowest, coalesce(a.gpus, 0)
FROM catalog_gpumodel g
LEFT JOIN LATERAL (
    SELECT min(o.price_usd) AS lowest,
           sum(exchange_book_share(o.state, o.gpus_offered, s.status, s.agent_verified_at IS NOT NULL,
                                   s.gpu_count, s.gpus_rented)) AS gpus
    FROM sellers_server s JOIN exchange_offer o ON o.server_id = s.id
    WHERE s.gpu_model_id = g.id
      AND exchange_book_share(o.state, o.gpus_offered, s.status, s.agent_verified_at IS NOT NULL,
                              s.gpu_count, s.gpus_rented) > 0
) a ON true
ON CONFLICT (gpu_model_id) DO UPDATE
    SET best_ask_usd = EXCLUDED.best_ask_usd, gpus_on_offer = EXCLUDED.gpus_on_offer;
"""

REVERSE = """
DROP TRIGGER IF EXISTS exchange_server_book_move ON sellers_server;
DROP FUNCTION IF EXISTS exchange_server_book_move();
DROP TRIGGER IF EXISTS exchange_offer_book_move ON exchange_offer;
DROP TRIGGER IF EXISTS exchange_offer_book_move_on_update ON exchange_offer;
DROP FUNCTION IF EXISTS exchange_offer_book_move();
DROP FUNCTION IF EXISTS exchange_book_move(bigint, integer, numeric, numeric);
DROP FUNCTION IF EXISTS exchange_book_lock(bigint, bigint);
DROP FUNCTION IF EXISTS exchange_book_best_ask(bigint);
DROP FUNCTION IF EXISTS exchange_book_share(text, integer, text, boolean, integer, integer);
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
            field=models.IntegerField(db_default=0, verbose_name="GPUs on offer"),
        ),
        migrations.RunPython(install, uninstall, elidable=False),
    ]
