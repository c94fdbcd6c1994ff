"""The web console and the HTTP listener's app: /metrics, the console's pages and their JSON
API, reading the cluster through the Kafka protocol (oncelog.client)."""
