variable "name" {
  description = "Prefix of every resource name."
  type        = string
  default     = "agent-mesh"
}

variable "region" {
  description = "AWS region."
  type        = string
  default     = "eu-central-1"
}

variable "vpc_cidr" {
  description = "CIDR of the VPC; split into public and private /20 subnets, one of each per AZ."
  type        = string
  default     = "10.40.0.0/16"
}

variable "az_count" {
  description = "Availability zones to spread over (2 or 3). MSK brokers are a multiple of it."
  type        = number
  default     = 2

  validation {
    condition     = var.az_count >= 2 && var.az_count <= 3
    error_message = "az_count must be 2 or 3."
  }
}

# --- the application ----------------------------------------------------------

variable "image_tag" {
  description = "Tag of the application image in the ECR repository this module creates (pushed by you, see README)."
  type        = string
  default     = "latest"
}

variable "image" {
  description = "Full image reference; overrides the ECR repository + image_tag when set."
  type        = string
  default     = ""
}

variable "processes" {
  description = "Fargate size and task count of each Procfile process. The defaults carry ~1,600 sends/s by the black-box figures; web scales first (docs/operations.md, Capacity)."
  type = map(object({
    cpu    = number
    memory = number
    count  = number
  }))
  default = {
    web          = { cpu = 512, memory = 1024, count = 2 }
    outbox       = { cpu = 512, memory = 1024, count = 1 }
    push         = { cpu = 512, memory = 1024, count = 2 }
    cron         = { cpu = 256, memory = 512, count = 1 }
    webhook      = { cpu = 256, memory = 512, count = 1 }
    "a2a-bridge" = { cpu = 256, memory = 512, count = 1 }
  }

  validation {
    condition     = sort(keys(var.processes)) == sort(["web", "outbox", "push", "cron", "webhook", "a2a-bridge"])
    error_message = "processes must define exactly web, outbox, push, cron, webhook and a2a-bridge (the Procfile)."
  }
}

variable "admin_usernames" {
  description = "Owners with access to the admin API (MESH_ADMIN_USERNAMES)."
  type        = list(string)
  default     = []
}

variable "extra_environment" {
  description = "More MESH_* settings for every process, e.g. { MESH_RATELIMIT_RATE = \"100\" }."
  type        = map(string)
  default     = {}
}

variable "sentry_dsn" {
  description = "Sentry DSN; stored in Secrets Manager. Empty: no Sentry."
  type        = string
  default     = ""
  sensitive   = true
}

variable "run_release_on_apply" {
  description = "Run the release task (migrations) with the AWS CLI whenever the image changes, before the services roll."
  type        = bool
  default     = true
}

# --- HTTP -----------------------------------------------------------------------

variable "certificate_arn" {
  description = "ACM certificate for HTTPS on the load balancer. Empty: HTTP only (testing)."
  type        = string
  default     = ""
}

variable "alb_idle_timeout" {
  description = "Seconds the load balancer keeps an idle connection; SSE keep-alives come every 15 s, long-polls wait up to 30 s."
  type        = number
  default     = 300

  validation {
    condition     = var.alb_idle_timeout >= 120
    error_message = "SSE streams need alb_idle_timeout >= 120 seconds."
  }
}

variable "forwarded_allow_ips" {
  description = "CIDRs whose X-Forwarded-For web trusts (uvicorn --forwarded-allow-ips). Empty: the public subnets, where the load balancer lives. Never \"*\": any client could pick its own address."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for c in var.forwarded_allow_ips : can(cidrhost(c, 0))])
    error_message = "forwarded_allow_ips must be CIDRs such as 10.40.0.0/20 (not \"*\")."
  }
}

# --- managed services -------------------------------------------------------------

variable "postgres_version" {
  description = "RDS PostgreSQL major version."
  type        = string
  default     = "17"
}

variable "db_instance_class" {
  description = "RDS instance class of the PostgreSQL database."
  type        = string
  default     = "db.t4g.medium"
}

variable "db_allocated_storage" {
  description = "GiB; storage autoscaling grows it up to 5x."
  type        = number
  default     = 50
}

variable "db_multi_az" {
  description = "Run the database as a Multi-AZ deployment (a standby in another zone)."
  type        = bool
  default     = true
}

variable "deletion_protection" {
  description = "Protect the database from `terraform destroy`."
  type        = bool
  default     = true
}

variable "redis_node_type" {
  description = "ElastiCache node type of the Redis replication group."
  type        = string
  default     = "cache.t4g.small"
}

variable "redis_engine_version" {
  description = "ElastiCache Redis engine version."
  type        = string
  default     = "7.1"
}

variable "kafka_version" {
  description = "MSK Kafka version."
  type        = string
  default     = "3.8.x"
}

variable "kafka_instance_type" {
  description = "MSK broker instance type."
  type        = string
  default     = "kafka.t3.small"
}

variable "kafka_brokers_per_az" {
  description = "MSK brokers in each availability zone."
  type        = number
  default     = 1
}

variable "kafka_partitions" {
  description = "Partitions of auto-created topics (inbox.events): the most push workers that can share the load."
  type        = number
  default     = 12
}

variable "log_retention_days" {
  description = "Days CloudWatch keeps the processes' logs."
  type        = number
  default     = 30
}
