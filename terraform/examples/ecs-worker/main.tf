# A worker on ECS Fargate consuming a queue made by the sqs-worker module. The module's outputs
# feed the task definition: QUEUE_URL from queue_url, the task role's policy from
# consumer_policy_json, and the inbox retention is checked against the queue's at plan time.

module "queue" {
  source = "../../modules/sqs-worker"

  name                       = var.name
  visibility_timeout_seconds = 30
  message_retention_seconds  = 345600 # 4 days
  max_receive_count          = 5
  inbox_retention_seconds    = var.inbox_retention_seconds
  alarm_actions              = var.alarm_actions
}

# The task role: what the worker's code may do. Exactly the consumer policy.
resource "aws_iam_role" "task" {
  name = "${var.name}-worker-task"
  assume_role_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Action    = "sts:AssumeRole"
      Principal = { Service = "ecs-tasks.amazonaws.com" }
    }]
  })
}

resource "aws_iam_policy" "consume" {
  name        = "${var.name}-consume"
  description = "Consume ${module.queue.queue_name} (sqsinbox worker)."
  policy      = module.queue.consumer_policy_json
}

resource "aws_iam_role_policy_attachment" "task_consume" {
  role       = aws_iam_role.task.name
  policy_arn = aws_iam_policy.consume.arn
}

# The execution role: what ECS needs to start the task (pull the image, write logs, read the
# DATABASE_URL secret). The worker's code never gets these.
resource "aws_iam_role" "execution" {
  name               = "${var.name}-worker-execution"
  assume_role_policy = aws_iam_role.task.assume_role_policy
}

resource "aws_iam_role_policy_attachment" "execution" {
  role       = aws_iam_role.execution.name
  policy_arn = "arn:aws:iam::aws:policy/service-role/AmazonECSTaskExecutionRolePolicy"
}

resource "aws_iam_role_policy" "execution_secret" {
  name = "read-database-url"
  role = aws_iam_role.execution.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect   = "Allow"
      Action   = "secretsmanager:GetSecretValue"
      Resource = var.database_url_secret_arn
    }]
  })
}

resource "aws_cloudwatch_log_group" "worker" {
  name              = "/ecs/${var.name}-worker"
  retention_in_days = 30
}

resource "aws_ecs_task_definition" "worker" {
  family                   = "${var.name}-worker"
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = 256
  memory                   = 512
  task_role_arn            = aws_iam_role.task.arn
  execution_role_arn       = aws_iam_role.execution.arn

  container_definitions = jsonencode([{
    name      = "worker"
    image     = var.image
    essential = true

    # SIGTERM starts a graceful stop: no new receives, in-flight handlers finish, their deletes
    # are flushed. ECS sends SIGKILL after stopTimeout seconds. A message cut off by SIGKILL is
    # not lost: its transaction rolls back and SQS redelivers it after the visibility timeout.
    stopTimeout = var.stop_timeout_seconds

    environment = [
      { name = "QUEUE_URL", value = module.queue.queue_url },
      { name = "AWS_REGION", value = var.region },
      { name = "HEALTH_ADDR", value = "127.0.0.1:8081" },
    ]

    # Liveness, not readiness: /livez fails only when the worker is wedged. In a database outage
    # every task pauses and is not ready, and a readiness check here would have ECS kill them all.
    # The worker binary asks its own /livez (`<binary> healthcheck`), so the image needs no curl.
    healthCheck = {
      command     = ["CMD", var.worker_command, "healthcheck"]
      interval    = 30
      timeout     = 5
      retries     = 3
      startPeriod = 60
    }
    # The worker's own settings that must agree with this file (set them in code or flags):
    #   - worker.Config.ShutdownTimeout plus 5 s below stopTimeout (the default, 20 s, is);
    #   - inbox.Config.Retention at least module.queue.redelivery_horizon_seconds (the default,
    #     28 days, is). The worker checks it against the queues at start and refuses to run;
    #     inbox_retention_seconds above makes plan fail first.
    secrets = [
      { name = "DATABASE_URL", valueFrom = var.database_url_secret_arn },
    ]

    logConfiguration = {
      logDriver = "awslogs"
      options = {
        awslogs-group         = aws_cloudwatch_log_group.worker.name
        awslogs-region        = var.region
        awslogs-stream-prefix = "worker"
      }
    }
  }])
}

resource "aws_ecs_service" "worker" {
  name            = "${var.name}-worker"
  cluster         = var.cluster_arn
  task_definition = aws_ecs_task_definition.worker.arn
  desired_count   = var.desired_count
  launch_type     = "FARGATE"

  # Start new tasks before stopping old ones; duplicates during the overlap are the inbox's job.
  deployment_minimum_healthy_percent = 100
  deployment_maximum_percent         = 200

  network_configuration {
    subnets          = var.subnet_ids
    security_groups  = var.security_group_ids
    assign_public_ip = false
  }
}
