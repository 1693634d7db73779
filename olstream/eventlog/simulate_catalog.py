"""The simulated engine's world: datasets, workflow types and failure messages.

Datasets are named by OpenLineage's conventions and shared between workflow types (one type
writes what another reads), so the lineage graph is connected. Namespaces are legal for their
system; some dataset names are non-ASCII, and one namespace has a non-ASCII (IDN) host, which the
writer API stores in its IDNA form.
"""

from __future__ import annotations

from dataclasses import dataclass

from olstream.contract.records import RunStatus

ORDERS_DB = "postgres://orders-db.internal:5432"
CRM_DB = "postgres://crm-db.bücher.example:5432"  # an IDN host: stored as crm-db.xn--bcher-kva.example
FINANCE_DB = "postgres://finance-db.internal:6432"
KAFKA = "kafka://broker-1.internal:9092"

# key -> (namespace, name)
DATASETS: dict[str, tuple[str, str]] = {
    "orders": (ORDERS_DB, "shop.public.orders"),
    "customers": (ORDERS_DB, "shop.public.customers"),
    "kunden": (CRM_DB, "crm.öffentlich.kunden"),
    "order_events": (KAFKA, "orders.events.v1"),
    "fx_rates": (KAFKA, "fx.rates"),
    "models_published": (KAFKA, "ml.models.published"),
    "raw_orders": ("s3://acme-raw", "orders/orders.parquet"),
    "raw_clients": ("s3://acme-raw-clients", "clients/日本/clients.json"),
    "features": ("s3://acme-ml", "features/customer_features.parquet"),
    "model": ("s3://acme-ml", "models/churn/model.bin"),
    "evaluation": ("s3://acme-ml", "models/churn/evaluation.json"),
    "enriched": ("bigquery", "acme-prod.analytics.orders_enriched"),
    "daily_sales": ("bigquery", "acme-prod.analytics.daily_sales"),
    "quality": ("bigquery", "acme-prod.quality.order_checks"),
    "sales_report": ("file", "/var/reports/ventes_été.csv"),
    "invoices": ("file", "/exports/invoices/Rechnungen_2024.csv"),
    "ecb_feed": ("file", "/imports/fx/ecb_eurofxref.xml"),
    "ledger": (FINANCE_DB, "finance.public.ledger"),
    "accounts": (FINANCE_DB, "finance.public.accounts"),
}


@dataclass(frozen=True, slots=True)
class WorkflowType:
    namespace: str
    name: str
    versions: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    children: tuple[str, ...] = ()
    schedule_minutes: int | None = None  # scheduled workflows carry nominal times
    principal: str | None = None


WORKFLOWS: dict[str, WorkflowType] = {
    w.name: w
    for w in (
        WorkflowType(
            "commerce",
            "ingest_orders",
            ("1.4.0", "1.5.0"),
            ("orders", "customers", "order_events", "kunden"),
            ("raw_orders", "raw_clients"),
            ("enrich_orders",),
            schedule_minutes=60,
            principal="svc-ingest",
        ),
        WorkflowType(
            "commerce",
            "enrich_orders",
            ("2.0",),
            ("raw_orders", "customers", "kunden", "raw_clients", "fx_rates"),
            ("enriched",),
            ("validate_partition",),
        ),
        WorkflowType(
            "commerce",
            "validate_partition",
            ("1", "2"),
            ("enriched", "orders"),
            ("quality",),
            ("repair_partition",),
        ),
        WorkflowType(
            "commerce",
            "repair_partition",
            ("1",),
            ("enriched", "raw_orders", "quality"),
            ("enriched",),
            ("notify_owner",),
        ),
        WorkflowType("commerce", "notify_owner", ("1",), ("quality",), ("order_events",)),
        WorkflowType(
            "analytics",
            "daily_sales_report",
            ("3.1", "3.2"),
            ("enriched", "fx_rates", "customers"),
            ("daily_sales", "sales_report"),
            ("export_report",),
            schedule_minutes=24 * 60,
            principal="svc-analytics",
        ),
        WorkflowType("analytics", "export_report", ("1.0",), ("daily_sales",), ("sales_report", "invoices")),
        WorkflowType(
            "ml-platform",
            "build_features",
            ("0.9", "1.0"),
            ("enriched", "kunden", "raw_clients", "daily_sales"),
            ("features",),
            ("train_model",),
            schedule_minutes=24 * 60,
        ),
        WorkflowType(
            "ml-platform", "train_model", ("5",), ("features", "daily_sales"), ("model",), ("evaluate_model",)
        ),
        WorkflowType(
            "ml-platform",
            "evaluate_model",
            ("5",),
            ("model", "features"),
            ("evaluation",),
            ("publish_model",),
        ),
        WorkflowType("ml-platform", "publish_model", ("1",), ("model", "evaluation"), ("models_published",)),
        WorkflowType(
            "finance",
            "reconcile_ledger",
            ("7", "8"),
            ("ledger", "accounts", "daily_sales", "fx_rates", "invoices"),
            ("ledger", "invoices"),
            schedule_minutes=24 * 60,
            principal="svc-finance",
        ),
        WorkflowType("finance", "stream_fx", ("1.1",), ("ecb_feed",), ("fx_rates",), principal="svc-fx"),
    )
}

ROOT_TYPES = ("ingest_orders", "daily_sales_report", "build_features", "reconcile_ledger", "stream_fx")
DEEP_CHAIN_ROOT = "ingest_orders"  # ingest -> enrich -> validate -> repair -> notify: depth 4
TENANTS = ("acme-eu", "acme-us", "acme-jp")
OPERATORS = ("alice", "bjørn", "chen.wei")

STATUS_WEIGHTS: dict[RunStatus | None, int] = {
    RunStatus.COMPLETED: 70,
    RunStatus.FAILED: 7,
    RunStatus.RETRIES_EXHAUSTED: 4,
    RunStatus.POISON: 3,
    RunStatus.SKIPPED_TO_DLQ: 3,
    RunStatus.QUARANTINED: 3,
    RunStatus.SUPERSEDED: 3,
    RunStatus.CANCELLED: 4,
    None: 3,  # left open
}

# status -> (error type, message template) choices; {dataset}, {n} and {operator} are filled in.
ERRORS: dict[RunStatus, tuple[tuple[str, str], ...]] = {
    RunStatus.FAILED: (
        ("psycopg.errors.UndefinedTable", 'relation "{dataset}" does not exist'),
        ("ZeroDivisionError", "division by zero in step {n}"),
        ("KeyError", "Schlüssel {n} fehlt in {dataset}"),
    ),
    RunStatus.RETRIES_EXHAUSTED: (
        ("olstream.engine.RetriesExhausted", "gave up after {n} attempts: connection reset by peer"),
        ("olstream.engine.RetriesExhausted", "timeout after {n} retries reading {dataset}"),
    ),
    RunStatus.POISON: (
        ("olstream.engine.PoisonMessage", "message {n} of {dataset} failed deserialization 3 times"),
    ),
    RunStatus.SKIPPED_TO_DLQ: (
        ("olstream.engine.SkippedToDLQ", "sent to dead-letter queue after schema mismatch on {dataset}"),
    ),
    RunStatus.QUARANTINED: (
        ("olstream.engine.QualityGateFailed", "output {dataset} quarantined: {n}% nulls in customer_id"),
        ("olstream.engine.QualityGateFailed", "données invalides dans {dataset}"),
    ),
    RunStatus.CANCELLED: (("olstream.engine.Cancelled", "cancelled by operator {operator}"),),
}

STACK_TRACE = (
    "Traceback (most recent call last):\n"
    '  File "/srv/engine/worker.py", line {n}, in run_step\n'
    "    result = step.execute(context)\n"
    '  File "/srv/workflows/{workflow}.py", line 88, in execute\n'
    "    rows = source.fetch()\n"
    "{error_type}: {message}"
)
