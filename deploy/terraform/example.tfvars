# cp example.tfvars terraform.tfvars, then edit.
region          = "eu-central-1"
name            = "agent-mesh"
image_tag       = "v0.1.0"
certificate_arn = "" # an ACM certificate ARN for HTTPS; empty = HTTP only
admin_usernames = ["alice"]
# sentry_dsn    = "https://...@o0.ingest.sentry.io/0"   # or TF_VAR_sentry_dsn

processes = {
  web          = { cpu = 512, memory = 1024, count = 2 }
  outbox       = { cpu = 512, memory = 1024, count = 1 }
  push         = { cpu = 512, memory = 1024, count = 2 }
  cron         = { cpu = 256, memory = 512, count = 1 }
  webhook      = { cpu = 256, memory = 512, count = 1 }
  "a2a-bridge" = { cpu = 256, memory = 512, count = 1 }
}
