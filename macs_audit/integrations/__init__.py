"""The services a run reports to once its own outputs are written (MLflow: integrations/mlflow.py). They read the
Report and the files the run wrote, never the model; a failure is an IntegrationError (exit 4), raised after the
outputs are safe."""
