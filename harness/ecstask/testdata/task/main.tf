# A task definition in the shape of terraform/examples/ecs-worker's, for ecstask's own test.
locals {
  secret = [{ name = "DATABASE_URL", valueFrom = var.secret_arn }]
  sidecars = var.with_sidecar ? [{
    name       = "sidecar"
    entryPoint = [var.command]
    command    = ["migrate", lower("NOW")]
    secrets    = local.secret
  }] : []
}

resource "aws_ecs_task_definition" "app" {
  container_definitions = jsonencode(concat([{
    name       = "app"
    entryPoint = [var.command]
    dependsOn  = var.with_sidecar ? [{ containerName = "sidecar", condition = "SUCCESS" }] : null
    environment = [
      { name = "QUEUE_URL", value = module.queue.queue_url },
      { name = "MODE", value = "fast" },
    ]
    healthCheck = { command = ["CMD", var.command, "healthcheck"] }
    secrets     = local.secret
  }], local.sidecars))
}
