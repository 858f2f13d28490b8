-- The least of the InnoDB Cluster metadata that MySQL Router's metadata
-- cache reads to follow a Group Replication group, for tests/helpers/
-- group.bash (gr_router_start). Written for the tests from the statements
-- Router 9.7 sends (see tests/group/README.md, "MySQL Router"); it is not
-- what MySQL Shell creates, and holds no ClusterSet, ReplicaSet or read
-- replica. Run on the group's primary, so every member has it; idempotent.
-- @CLUSTER_ID@, @GROUP_NAME@, @ROUTER_ID@, @ROUTER_USER@, @ROUTER_PASSWORD@
-- and @MEMBERS@ (the instances' rows) are filled in by the caller.

CREATE DATABASE IF NOT EXISTS mysql_innodb_cluster_metadata;
USE mysql_innodb_cluster_metadata;

-- Router refuses a major version other than 2 and reads the minor to know
-- which columns and views exist: 2.2 has v2_router_options.
CREATE OR REPLACE SQL SECURITY INVOKER VIEW schema_version (major, minor, patch) AS
	SELECT 2, 2, 0;

-- Every table has a primary key: Group Replication refuses a write to a
-- table without one.
CREATE TABLE IF NOT EXISTS clusters (
	cluster_id VARCHAR(36) PRIMARY KEY,
	cluster_name VARCHAR(63) NOT NULL,
	group_name VARCHAR(36) NOT NULL,
	router_options JSON
);
CREATE TABLE IF NOT EXISTS instances (
	instance_id INT UNSIGNED AUTO_INCREMENT PRIMARY KEY,
	cluster_id VARCHAR(36) NOT NULL,
	mysql_server_uuid VARCHAR(40) NOT NULL UNIQUE,
	endpoint VARCHAR(265) NOT NULL
);
-- The row Router keeps up to date itself, through the primary: its
-- version, ports and configuration (attributes) and last_check_in.
CREATE TABLE IF NOT EXISTS routers (
	router_id INT UNSIGNED PRIMARY KEY,
	router_name VARCHAR(265) NOT NULL,
	product_name VARCHAR(128) NOT NULL,
	address VARCHAR(256) NOT NULL,
	version VARCHAR(12),
	last_check_in TIMESTAMP NULL,
	attributes JSON,
	cluster_id VARCHAR(36),
	options JSON
);

CREATE OR REPLACE SQL SECURITY INVOKER VIEW v2_gr_clusters AS
	SELECT 'gr' AS cluster_type, 'pm' AS primary_mode, cluster_id, cluster_name,
		'' AS description, group_name, NULL AS clusterset_id, router_options,
		JSON_OBJECT() AS attributes, JSON_OBJECT() AS options
	FROM clusters;
CREATE OR REPLACE SQL SECURITY INVOKER VIEW v2_clusters AS
	SELECT cluster_type, primary_mode, cluster_id, cluster_name, description,
		router_options, attributes, options
	FROM v2_gr_clusters;
-- xendpoint: X Protocol is not routed here; empty, as for an instance
-- without mysqlx.
CREATE OR REPLACE SQL SECURITY INVOKER VIEW v2_instances AS
	SELECT instance_id, cluster_id, endpoint AS label, mysql_server_uuid,
		endpoint AS address, endpoint, '' AS xendpoint, JSON_OBJECT() AS attributes
	FROM instances;
CREATE OR REPLACE SQL SECURITY INVOKER VIEW v2_this_instance AS
	SELECT i.cluster_id, i.instance_id, c.cluster_name, 'gr' AS cluster_type,
		'group-member' AS instance_type
	FROM instances i JOIN clusters c ON c.cluster_id = i.cluster_id
		JOIN performance_schema.global_variables v
		ON v.VARIABLE_NAME = 'server_uuid' AND v.VARIABLE_VALUE = i.mysql_server_uuid;
-- (A view may not name @@server_uuid: 1351.)
CREATE OR REPLACE SQL SECURITY INVOKER VIEW v2_routers AS
	SELECT router_id, router_name, product_name, address, version, last_check_in,
		attributes, cluster_id, NULL AS clusterset_id, options
	FROM routers;
CREATE OR REPLACE SQL SECURITY INVOKER VIEW v2_router_options AS
	SELECT r.router_id, COALESCE(r.options, c.router_options, JSON_OBJECT()) AS router_options
	FROM routers r LEFT JOIN clusters c ON c.cluster_id = r.cluster_id;
-- No ClusterSet: its views exist, empty, for the statements that join them.
CREATE OR REPLACE SQL SECURITY INVOKER VIEW v2_cs_clustersets AS
	SELECT NULL AS clusterset_id, NULL AS domain_name, NULL AS view_id,
		NULL AS router_options, NULL AS attributes FROM DUAL WHERE FALSE;
CREATE OR REPLACE SQL SECURITY INVOKER VIEW v2_cs_members AS
	SELECT NULL AS clusterset_id, NULL AS cluster_id, NULL AS member_role,
		0 AS invalidated FROM DUAL WHERE FALSE;

INSERT INTO clusters (cluster_id, cluster_name, group_name, router_options)
	VALUES ('@CLUSTER_ID@', 'lrgroup', '@GROUP_NAME@', JSON_OBJECT())
	ON DUPLICATE KEY UPDATE group_name = VALUES(group_name);
-- One row per member: (cluster, uuid, 'host:port'), by the caller.
DELETE FROM instances;
INSERT INTO instances (cluster_id, mysql_server_uuid, endpoint) VALUES
@MEMBERS@;
INSERT INTO routers (router_id, router_name, product_name, address, cluster_id)
	VALUES (@ROUTER_ID@, 'lrtest', 'MySQL Router', '127.0.0.20', '@CLUSTER_ID@')
	ON DUPLICATE KEY UPDATE router_name = router_name;

-- Router's account: it reads the metadata and the group's tables, and
-- updates its own row.
CREATE USER IF NOT EXISTS '@ROUTER_USER@'@'127.0.0.%';
ALTER USER '@ROUTER_USER@'@'127.0.0.%' IDENTIFIED BY '@ROUTER_PASSWORD@';
GRANT SELECT, EXECUTE ON mysql_innodb_cluster_metadata.* TO '@ROUTER_USER@'@'127.0.0.%';
GRANT UPDATE, INSERT, DELETE ON mysql_innodb_cluster_metadata.routers
	TO '@ROUTER_USER@'@'127.0.0.%';
GRANT UPDATE, INSERT, DELETE ON mysql_innodb_cluster_metadata.v2_routers
	TO '@ROUTER_USER@'@'127.0.0.%';
GRANT SELECT ON performance_schema.replication_group_members TO '@ROUTER_USER@'@'127.0.0.%';
GRANT SELECT ON performance_schema.replication_group_member_stats
	TO '@ROUTER_USER@'@'127.0.0.%';
GRANT SELECT ON performance_schema.global_variables TO '@ROUTER_USER@'@'127.0.0.%';
