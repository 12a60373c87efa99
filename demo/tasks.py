"""The demo's Celery task: the simulated host agents of the demo servers (demo.agents). Scheduled
by the demo app (demo.apps), which only the embedded and test settings install."""

from celery import shared_task

from .seed import demo_agents_run

DEMO_AGENTS_EVERY_SECONDS = 15.0


@shared_task(name="demo.agents_heartbeat", time_limit=60, soft_time_limit=50)
def demo_agents_heartbeat_task() -> int:
    return demo_agents_run()
