# The managed data stores: RDS PostgreSQL (source of truth), ElastiCache Redis
# (push streams, rate limits, arq queue) and MSK Kafka (the inbox.events bus).

# --- PostgreSQL -------------------------------------------------------------------

resource "random_password" "db" {
  length  = 40
  special = false # it goes into a URL
}

resource "aws_db_subnet_group" "main" {
  name       = var.name
  subnet_ids = aws_subnet.private[*].id
}

resource "aws_db_parameter_group" "main" {
  name_prefix = "${var.name}-pg${var.postgres_version}-"
  family      = "postgres${var.postgres_version}"

  parameter {
    name  = "rds.force_ssl"
    value = "1"
  }

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_db_instance" "main" {
  identifier     = var.name
  engine         = "postgres"
  engine_version = var.postgres_version
  instance_class = var.db_instance_class

  db_name  = "mesh"
  username = "mesh"
  password = random_password.db.result
  port     = 5432

  allocated_storage     = var.db_allocated_storage
  max_allocated_storage = var.db_allocated_storage * 5
  storage_type          = "gp3"
  storage_encrypted     = true

  multi_az               = var.db_multi_az
  db_subnet_group_name   = aws_db_subnet_group.main.name
  vpc_security_group_ids = [aws_security_group.data["postgres"].id]
  parameter_group_name   = aws_db_parameter_group.main.name
  publicly_accessible    = false

  backup_retention_period    = 7
  auto_minor_version_upgrade = true
  deletion_protection        = var.deletion_protection
  skip_final_snapshot        = false
  final_snapshot_identifier  = "${var.name}-final"
  copy_tags_to_snapshot      = true
  apply_immediately          = false
}

# --- Redis ----------------------------------------------------------------------------

resource "random_password" "redis" {
  length  = 48
  special = false # AUTH tokens exclude @, " and /; it also goes into a URL
}

resource "aws_elasticache_subnet_group" "main" {
  name       = var.name
  subnet_ids = aws_subnet.private[*].id
}

resource "aws_elasticache_parameter_group" "main" {
  name   = "${var.name}-redis7"
  family = "redis7"

  # Streams and queued jobs must never be evicted silently: fail writes instead.
  parameter {
    name  = "maxmemory-policy"
    value = "noeviction"
  }
}

resource "aws_elasticache_replication_group" "main" {
  replication_group_id = var.name
  description          = "Agent Mesh push streams, rate limits and job queue"
  engine               = "redis"
  engine_version       = var.redis_engine_version
  node_type            = var.redis_node_type
  port                 = 6379

  num_cache_clusters         = 2 # primary + replica in another AZ
  automatic_failover_enabled = true
  multi_az_enabled           = true

  subnet_group_name    = aws_elasticache_subnet_group.main.name
  security_group_ids   = [aws_security_group.data["redis"].id]
  parameter_group_name = aws_elasticache_parameter_group.main.name

  at_rest_encryption_enabled = true
  transit_encryption_enabled = true
  auth_token                 = random_password.redis.result

  snapshot_retention_limit = 3
  apply_immediately        = false
}

# --- Kafka ------------------------------------------------------------------------------

resource "aws_msk_configuration" "main" {
  name           = "${var.name}-${replace(var.kafka_version, ".", "-")}"
  kafka_versions = [var.kafka_version]

  # The relay produces with acks=all; with replication 2 a write survives the
  # loss of a broker, and min.insync.replicas=1 keeps writes flowing during a
  # rolling broker update. (Postgres stays the source of truth either way.)
  server_properties = <<-PROPERTIES
    auto.create.topics.enable=true
    num.partitions=${var.kafka_partitions}
    default.replication.factor=${min(2, var.az_count * var.kafka_brokers_per_az)}
    min.insync.replicas=1
    unclean.leader.election.enable=false
    log.retention.hours=72
  PROPERTIES

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_msk_cluster" "main" {
  cluster_name           = var.name
  kafka_version          = var.kafka_version
  number_of_broker_nodes = var.az_count * var.kafka_brokers_per_az

  broker_node_group_info {
    instance_type   = var.kafka_instance_type
    client_subnets  = aws_subnet.private[*].id
    security_groups = [aws_security_group.data["kafka"].id]

    storage_info {
      ebs_storage_info {
        volume_size = 100
      }
    }
  }

  configuration_info {
    arn      = aws_msk_configuration.main.arn
    revision = aws_msk_configuration.main.latest_revision
  }

  encryption_info {
    encryption_in_transit {
      # Clients speak TLS only (9094, MESH_KAFKA_SECURITY_PROTOCOL=SSL);
      # broker-to-broker traffic is encrypted too.
      client_broker = "TLS"
      in_cluster    = true
    }
  }

  logging_info {
    broker_logs {
      cloudwatch_logs {
        enabled   = true
        log_group = aws_cloudwatch_log_group.kafka.name
      }
    }
  }
}

resource "aws_cloudwatch_log_group" "kafka" {
  name              = "/${var.name}/kafka"
  retention_in_days = var.log_retention_days
}

# --- secrets: what the processes read as MESH_* variables ----------------------------------

resource "random_password" "jwt" {
  length  = 64
  special = false
}

# web's GET /metrics answers only "Authorization: Bearer <this>" (the load
# balancer does not forward /metrics at all; this guards the VPC side).
resource "random_password" "metrics" {
  length  = 48
  special = false
}

locals {
  # Whether a DSN was given is not a secret; the DSN is.
  sentry_enabled = nonsensitive(var.sentry_dsn != "")

  secret_values = merge(
    {
      MESH_DATABASE_URL  = "postgresql://mesh:${random_password.db.result}@${aws_db_instance.main.address}:${aws_db_instance.main.port}/mesh?sslmode=require"
      MESH_REDIS_URL     = "rediss://:${random_password.redis.result}@${aws_elasticache_replication_group.main.primary_endpoint_address}:6379/0"
      MESH_JWT_SECRET    = random_password.jwt.result
      MESH_METRICS_TOKEN = random_password.metrics.result
    },
    local.sentry_enabled ? { MESH_SENTRY_DSN = var.sentry_dsn } : {},
  )
  # Names only, known at plan time (the values are not, and may be sensitive).
  secret_names = concat(
    ["MESH_DATABASE_URL", "MESH_REDIS_URL", "MESH_JWT_SECRET", "MESH_METRICS_TOKEN"],
    local.sentry_enabled ? ["MESH_SENTRY_DSN"] : [],
  )
}

resource "aws_secretsmanager_secret" "mesh" {
  for_each                = toset(local.secret_names)
  name_prefix             = "${var.name}/${lower(replace(trimprefix(each.key, "MESH_"), "_", "-"))}-"
  description             = "Agent Mesh ${each.key}"
  recovery_window_in_days = 7
}

resource "aws_secretsmanager_secret_version" "mesh" {
  for_each      = toset(local.secret_names)
  secret_id     = aws_secretsmanager_secret.mesh[each.key].id
  secret_string = local.secret_values[each.key]
}
