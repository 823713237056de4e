# The Procfile on ECS Fargate: one service per long-running process (web
# behind the load balancer; outbox, push, cron, webhook and a2a-bridge without
# one) and a one-off
# `release` task that applies the migrations before the services roll.

data "aws_partition" "current" {}

resource "aws_ecr_repository" "app" {
  name                 = var.name
  image_tag_mutability = "MUTABLE"

  image_scanning_configuration {
    scan_on_push = true
  }
}

resource "aws_ecs_cluster" "main" {
  name = var.name

  setting {
    name  = "containerInsights"
    value = "enabled"
  }
}

resource "aws_cloudwatch_log_group" "app" {
  name              = "/${var.name}/app"
  retention_in_days = var.log_retention_days
}

locals {
  image = var.image != "" ? var.image : "${aws_ecr_repository.app.repository_url}:${var.image_tag}"

  # Whose X-Forwarded-For web believes: the load balancer's subnets only. A peer
  # anywhere else (another task in the VPC, anything that reaches port 8080)
  # is its own client address, so no header can dodge the per-address throttles.
  forwarded_allow_ips = join(",", length(var.forwarded_allow_ips) > 0 ? var.forwarded_allow_ips : aws_subnet.public[*].cidr_block)

  # The Procfile's commands. web listens on every interface of its task, trusts
  # X-Forwarded-* from the load balancer only, and gives open SSE streams 30 s
  # to end on SIGTERM (clients resume from Last-Event-ID on another task).
  commands = {
    release = ["python", "-m", "app.platform.migrate"]
    web = [
      "uvicorn", "app.main:create_app", "--factory", "--host", "0.0.0.0", "--port", "8080",
      "--no-access-log", "--proxy-headers", "--forwarded-allow-ips", local.forwarded_allow_ips,
      "--timeout-graceful-shutdown", "30",
    ]
    outbox       = ["python", "-m", "workers.relay"]
    push         = ["python", "-m", "workers.push"]
    cron         = ["arq", "cron.worker.WorkerSettings"]
    webhook      = ["python", "-m", "workers.webhook"]
    "a2a-bridge" = ["python", "-m", "workers.a2a_bridge"]
  }

  sizes = merge(var.processes, { release = { cpu = 256, memory = 512, count = 0 } })

  environment = merge(
    {
      MESH_BUS                     = "kafka"
      MESH_KAFKA_BOOTSTRAP         = aws_msk_cluster.main.bootstrap_brokers_tls
      MESH_KAFKA_SECURITY_PROTOCOL = "SSL"
      MESH_ADMIN_USERNAMES         = jsonencode(var.admin_usernames)
      MESH_SENTRY_ENVIRONMENT      = var.name
    },
    var.extra_environment,
  )
  # Workers serve their Prometheus metrics on a port of their own, on every
  # interface of the task (MESH_HOST); web serves /metrics on its HTTP port,
  # to "Authorization: Bearer <MESH_METRICS_TOKEN>" only (the ALB never forwards it).
  # A scraper in the VPC needs an ingress rule on 9100 to the app security group.
  # The Procfile's processes besides web and release: each serves its metrics on 9100.
  workers            = ["outbox", "push", "cron", "webhook", "a2a-bridge"]
  worker_environment = { MESH_METRICS_PORT = "9100", MESH_HOST = "0.0.0.0" }

  secrets = [for name in local.secret_names : {
    name      = name
    valueFrom = aws_secretsmanager_secret.mesh[name].arn
  }]
}

# --- IAM: ECS may pull the image, write logs and read our secrets; the
# processes themselves call no AWS API and get a role with no permissions. ---------

data "aws_iam_policy_document" "ecs_tasks_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ecs-tasks.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "execution" {
  name_prefix        = "${var.name}-exec-"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_assume.json
}

resource "aws_iam_role_policy_attachment" "execution" {
  role       = aws_iam_role.execution.name
  policy_arn = "arn:${data.aws_partition.current.partition}:iam::aws:policy/service-role/AmazonECSTaskExecutionRolePolicy"
}

resource "aws_iam_role_policy" "execution_secrets" {
  name = "read-mesh-secrets"
  role = aws_iam_role.execution.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect   = "Allow"
      Action   = ["secretsmanager:GetSecretValue"]
      Resource = [for s in aws_secretsmanager_secret.mesh : s.arn]
    }]
  })
}

resource "aws_iam_role" "task" {
  name_prefix        = "${var.name}-task-"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_assume.json
}

# --- task definitions: web, the workers, release --------------------------------------------

resource "aws_ecs_task_definition" "process" {
  for_each = local.commands

  family                   = "${var.name}-${each.key}"
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = local.sizes[each.key].cpu
  memory                   = local.sizes[each.key].memory
  execution_role_arn       = aws_iam_role.execution.arn
  task_role_arn            = aws_iam_role.task.arn

  runtime_platform {
    operating_system_family = "LINUX"
    cpu_architecture        = "X86_64"
  }

  container_definitions = jsonencode([{
    name      = each.key
    image     = local.image
    command   = each.value
    essential = true
    # SIGTERM first; the processes finish or release in-flight work (Fargate allows up to 120 s).
    stopTimeout = 60
    portMappings = (
      each.key == "web" ? [{ containerPort = 8080, protocol = "tcp" }] :
      contains(local.workers, each.key) ? [{ containerPort = 9100, protocol = "tcp" }] : []
    )
    environment = [for k, v in merge(
      local.environment,
      contains(local.workers, each.key) ? local.worker_environment : {},
    ) : { name = k, value = v }]
    secrets = local.secrets
    logConfiguration = {
      logDriver = "awslogs"
      options = {
        awslogs-group         = aws_cloudwatch_log_group.app.name
        awslogs-region        = var.region
        awslogs-stream-prefix = each.key
      }
    }
  }])
}

# --- the release task: migrations before the services roll ---------------------------------

locals {
  release_script = <<-SCRIPT
    set -euo pipefail
    arn=$(aws ecs run-task --region ${var.region} --cluster ${aws_ecs_cluster.main.name} \
      --launch-type FARGATE --task-definition ${aws_ecs_task_definition.process["release"].arn} \
      --network-configuration 'awsvpcConfiguration={subnets=[${join(",", aws_subnet.private[*].id)}],securityGroups=[${aws_security_group.app.id}],assignPublicIp=DISABLED}' \
      --query 'tasks[0].taskArn' --output text)
    if [ -z "$arn" ] || [ "$arn" = "None" ]; then
      echo "the release task did not start (is the image pushed? see README)" >&2
      exit 1
    fi
    echo "release task: $arn"
    aws ecs wait tasks-stopped --region ${var.region} --cluster ${aws_ecs_cluster.main.name} --tasks "$arn"
    code=$(aws ecs describe-tasks --region ${var.region} --cluster ${aws_ecs_cluster.main.name} --tasks "$arn" \
      --query 'tasks[0].containers[0].exitCode' --output text)
    if [ "$code" != "0" ]; then
      echo "release task failed (exit code $code); logs: ${aws_cloudwatch_log_group.app.name}, stream prefix release" >&2
      exit 1
    fi
  SCRIPT
}

resource "terraform_data" "release" {
  count = var.run_release_on_apply ? 1 : 0

  # A new image (or any change of the release task) runs the migrations again;
  # applied versions are skipped, so a re-run is a no-op.
  triggers_replace = [aws_ecs_task_definition.process["release"].arn]

  provisioner "local-exec" {
    interpreter = ["/bin/bash", "-c"]
    command     = local.release_script
  }

  depends_on = [
    aws_db_instance.main,
    aws_secretsmanager_secret_version.mesh,
    aws_iam_role_policy.execution_secrets,
    aws_iam_role_policy_attachment.execution,
    aws_route_table_association.private,
    aws_nat_gateway.main,
  ]
}

# --- services ------------------------------------------------------------------------------------

resource "aws_ecs_service" "process" {
  for_each = var.processes

  name                               = each.key
  cluster                            = aws_ecs_cluster.main.id
  task_definition                    = aws_ecs_task_definition.process[each.key].arn
  desired_count                      = each.value.count
  launch_type                        = "FARGATE"
  propagate_tags                     = "SERVICE"
  deployment_minimum_healthy_percent = 100
  deployment_maximum_percent         = 200
  health_check_grace_period_seconds  = each.key == "web" ? 30 : null

  deployment_circuit_breaker {
    enable   = true
    rollback = true
  }

  network_configuration {
    subnets          = aws_subnet.private[*].id
    security_groups  = [aws_security_group.app.id]
    assign_public_ip = false
  }

  dynamic "load_balancer" {
    for_each = each.key == "web" ? [aws_lb_target_group.web.arn] : []
    content {
      target_group_arn = load_balancer.value
      container_name   = "web"
      container_port   = 8080
    }
  }

  depends_on = [
    terraform_data.release,
    aws_lb_listener.http,
    aws_secretsmanager_secret_version.mesh,
    aws_iam_role_policy.execution_secrets,
    aws_iam_role_policy_attachment.execution,
  ]
}

# --- the load balancer in front of web ------------------------------------------------------

resource "aws_lb" "web" {
  name                       = var.name
  load_balancer_type         = "application"
  subnets                    = aws_subnet.public[*].id
  security_groups            = [aws_security_group.alb.id]
  idle_timeout               = var.alb_idle_timeout # SSE and long-poll connections stay open
  drop_invalid_header_fields = true
}

resource "aws_lb_target_group" "web" {
  name_prefix          = "mesh-"
  port                 = 8080
  protocol             = "HTTP"
  target_type          = "ip"
  vpc_id               = aws_vpc.main.id
  deregistration_delay = 30

  health_check {
    path                = "/healthz" # process alive; /readyz would drain every task when a dependency blips
    matcher             = "200"
    interval            = 15
    timeout             = 5
    healthy_threshold   = 2
    unhealthy_threshold = 3
  }

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_lb_listener" "http" {
  load_balancer_arn = aws_lb.web.arn
  port              = 80
  protocol          = "HTTP"

  default_action {
    type             = var.certificate_arn == "" ? "forward" : "redirect"
    target_group_arn = var.certificate_arn == "" ? aws_lb_target_group.web.arn : null

    dynamic "redirect" {
      for_each = var.certificate_arn == "" ? [] : [1]
      content {
        port        = "443"
        protocol    = "HTTPS"
        status_code = "HTTP_301"
      }
    }
  }
}

# /metrics and /readyz are for the operator's scraper and probes inside the VPC,
# never for the internet: the listener that serves traffic answers them 404
# itself, before any request reaches a task (web's /metrics also wants
# MESH_METRICS_TOKEN). The health check (/healthz) goes to the tasks directly.
resource "aws_lb_listener_rule" "internal_only" {
  listener_arn = var.certificate_arn == "" ? aws_lb_listener.http.arn : aws_lb_listener.https[0].arn
  priority     = 1

  action {
    type = "fixed-response"
    fixed_response {
      content_type = "application/json"
      message_body = jsonencode({ type = "about:blank", title = "Not Found", status = 404, detail = "not served on the public load balancer" })
      status_code  = "404"
    }
  }

  condition {
    path_pattern {
      values = ["/metrics", "/metrics/*", "/readyz", "/readyz/*"]
    }
  }
}

resource "aws_lb_listener" "https" {
  count             = var.certificate_arn == "" ? 0 : 1
  load_balancer_arn = aws_lb.web.arn
  port              = 443
  protocol          = "HTTPS"
  ssl_policy        = "ELBSecurityPolicy-TLS13-1-2-2021-06"
  certificate_arn   = var.certificate_arn

  default_action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.web.arn
  }
}
