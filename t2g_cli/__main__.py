"""``python -m t2g_cli`` (what ``accelerate launch -m t2g_cli ppo train ...`` runs in each process)."""

from t2g_cli import main

main()
