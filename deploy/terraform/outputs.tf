output "api_url" {
  description = "Base URL of the HTTP API (docs at /docs, OpenAPI at /openapi.json)."
  value       = "${var.certificate_arn == "" ? "http" : "https"}://${aws_lb.web.dns_name}"
}

output "region" {
  description = "AWS region the stack runs in."
  value       = var.region
}

output "ecr_repository_url" {
  description = "Push the application image here (see README)."
  value       = aws_ecr_repository.app.repository_url
}

output "image" {
  description = "The image the tasks run."
  value       = local.image
}

output "ecs_cluster" {
  description = "ECS cluster running the web, outbox, push and cron services."
  value       = aws_ecs_cluster.main.name
}

output "database_endpoint" {
  description = "RDS PostgreSQL endpoint (host:port), reachable only from the services' security group."
  value       = aws_db_instance.main.endpoint
}

output "redis_endpoint" {
  description = "ElastiCache Redis primary endpoint address."
  value       = aws_elasticache_replication_group.main.primary_endpoint_address
}

output "kafka_bootstrap_brokers" {
  description = "MSK bootstrap brokers (TLS), the value of MESH_KAFKA_BOOTSTRAP."
  value       = aws_msk_cluster.main.bootstrap_brokers_tls
}

output "secret_arns" {
  description = "Secrets Manager ARNs of the MESH_* secrets the processes receive."
  value       = { for name, s in aws_secretsmanager_secret.mesh : name => s.arn }
}

output "log_group" {
  description = "CloudWatch log group every process writes to."
  value       = aws_cloudwatch_log_group.app.name
}

output "release_command" {
  description = "Runs the migrations by hand (the same as run_release_on_apply does)."
  value       = local.release_script
}
