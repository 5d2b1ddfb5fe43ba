import DeviceSimulator
import Foundation
import Gateway
import TestSupport
import XCTest

/// The files under deploy/ are read by the gateway's own YAML reader (so they stay free of anchors, tags and
/// duplicate keys) and hang together: the configurations they carry validate, and ports, paths, selectors
/// and shutdown timings agree across the manifests. Nothing here is applied to a cluster or run by Docker.
final class DeployFilesTests: XCTestCase {
    private static let deploy = TestPaths.repository + "/deploy"

    func testEveryDeployYAMLDocumentParses() throws {
        let files = try DeployFile.all(under: Self.deploy)
        let names = files.map(\.relativePath)
        for expected in ["docker/compose.yaml", "docker/gateway.yaml", "kubernetes/configmap.yaml",
                         "kubernetes/gateway-deployment.yaml", "kubernetes/redis-statefulset.yaml",
                         "kubernetes-tls/configmap.yaml", "kubernetes-tls/gateway-deployment.yaml"] {
            XCTAssertTrue(names.contains(expected), "deploy/\(expected) is missing; found \(names)")
        }
        for file in files {
            XCTAssertFalse(try file.documents().isEmpty, "deploy/\(file.relativePath) holds no YAML document")
        }
    }

    func testEveryKubernetesDocumentIsANamedResourceInTheNamespace() throws {
        let documents = try kubernetesDocuments()
        let namespace = try XCTUnwrap(documents.first { $0["kind"]?.text == "Namespace" }?["metadata", "name"]?.text)
        for document in documents {
            XCTAssertFalse(document["apiVersion"]?.text?.isEmpty ?? true, "\(document.origin): apiVersion")
            let kind = try XCTUnwrap(document["kind"]?.text, "\(document.origin): kind")
            XCTAssertFalse(document["metadata", "name"]?.text?.isEmpty ?? true, "\(document.origin): metadata.name")
            if !["Namespace", "Kustomization"].contains(kind) {
                XCTAssertEqual(document["metadata", "namespace"]?.text, namespace, "\(document.origin): metadata.namespace")
            }
        }
        let kinds = Set(documents.compactMap { $0["kind"]?.text })
        XCTAssertTrue(kinds.isSuperset(of: ["Namespace", "ConfigMap", "Deployment", "Service", "PodDisruptionBudget", "StatefulSet"]),
                      "kinds found: \(kinds.sorted())")
    }

    func testConfigMapGatewayConfigValidatesAndMatchesTheManifests() throws {
        let documents = try kubernetesDocuments()
        let configMap = try resource(documents, kind: "ConfigMap")
        let text = try XCTUnwrap(configMap["data", "gateway.yaml"]?.text, "ConfigMap data.gateway.yaml")
        let pod = try podSpec(resource(documents, kind: "Deployment"))
        let container = try XCTUnwrap(pod["containers"]?.items.first)
        // Every ${NAME} in gateway.yaml must be an environment variable of the container, taken from a Secret.
        let secrets = Set(documents.filter { $0["kind"]?.text == "Secret" }.compactMap { $0["metadata", "name"]?.text })
        var environment: [String: String] = [:]
        for variable in container["env"]?.items ?? [] {
            guard let name = variable["name"]?.text, let secret = variable["valueFrom", "secretKeyRef", "name"]?.text else { continue }
            XCTAssertTrue(secrets.contains(secret), "\(name) comes from the Secret \(secret), defined next to it")
            environment[name] = "from-\(secret)"
        }
        let config = try GatewayConfig.parse(yaml: text, environment: environment)
        XCTAssertEqual(config.redis.password, "from-redis-auth", "the Redis password comes from the Secret")
        XCTAssertTrue(config.appAttest.trustAnchor.isApple, "a deployment must verify against Apple's root")
        XCTAssertEqual(config.listen.host, "0.0.0.0", "probes and the Service reach the pod IP")
        XCTAssertEqual(config.adminListen.host, "0.0.0.0", "probes reach the pod IP")

        XCTAssertEqual(try containerPort(container, "http"), config.listen.port)
        XCTAssertEqual(try containerPort(container, "admin"), config.adminListen.port)

        let redisService = try resource(documents, kind: "Service", name: config.redis.host)
        XCTAssertEqual(redisService["spec", "ports"]?.items.first?["port"]?.text, String(config.redis.port),
                       "redis.url points at the Redis Service")

        let volume = try XCTUnwrap(pod["volumes"]?.items.first { $0["configMap", "name"]?.text == configMap["metadata", "name"]?.text },
                                   "a volume mounts the ConfigMap")
        let mount = try XCTUnwrap(container["volumeMounts"]?.items.first { $0["name"]?.text == volume["name"]?.text })
        let args = container["args"]?.items.compactMap(\.text) ?? []
        XCTAssertEqual(try option("--config", in: args), try XCTUnwrap(mount["mountPath"]?.text) + "/gateway.yaml")
    }

    func testDeploymentIsHardenedProbedAndDrainsBeforeItIsKilled() throws {
        let documents = try kubernetesDocuments()
        let deployment = try resource(documents, kind: "Deployment")
        XCTAssertEqual(deployment["spec", "replicas"]?.text, "3")
        let pod = try podSpec(deployment)
        let container = try XCTUnwrap(pod["containers"]?.items.first)

        for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
            XCTAssertEqual(container[probe, "httpGet", "path"]?.text, path, probe)
            XCTAssertEqual(container[probe, "httpGet", "port"]?.text, "admin", probe)
        }
        XCTAssertEqual(try containerPort(container, "admin"), 9901)

        XCTAssertEqual(pod["securityContext", "runAsNonRoot"]?.text, "true")
        XCTAssertEqual(container["securityContext", "readOnlyRootFilesystem"]?.text, "true")
        XCTAssertEqual(container["securityContext", "allowPrivilegeEscalation"]?.text, "false")
        XCTAssertEqual(container["securityContext", "capabilities", "drop"]?.items.compactMap(\.text), ["ALL"])
        XCTAssertNotNil(container["resources", "requests", "cpu"]?.text)
        XCTAssertNotNil(container["resources", "limits", "memory"]?.text)

        let args = container["args"]?.items.compactMap(\.text) ?? []
        let drain = try XCTUnwrap(Int(try option("--drain-seconds", in: args)))
        let preStop = container["lifecycle", "preStop", "exec", "command"]?.items.compactMap(\.text) ?? []
        XCTAssertTrue(preStop.first?.hasSuffix("sleep") ?? false, "preStop sleeps: \(preStop)")
        let sleep = try XCTUnwrap(preStop.last.flatMap { Int($0) })
        let grace = try XCTUnwrap(pod["terminationGracePeriodSeconds"]?.text.flatMap { Int($0) })
        XCTAssertGreaterThan(grace, sleep + drain, "the grace period covers the preStop sleep and the whole drain")
    }

    func testServicesAndBudgetSelectTheirPods() throws {
        let documents = try kubernetesDocuments()
        let deployment = try resource(documents, kind: "Deployment")
        let podLabels = try labels(deployment["spec", "template", "metadata", "labels"])
        XCTAssertEqual(try labels(deployment["spec", "selector", "matchLabels"]), podLabels)

        let service = try resource(documents, kind: "Service", name: "app-attest-gateway")
        XCTAssertEqual(try labels(service["spec", "selector"]), podLabels)
        let port = try XCTUnwrap(service["spec", "ports"]?.items.first)
        XCTAssertEqual(port["port"]?.text, "80")
        let container = try XCTUnwrap(podSpec(deployment)["containers"]?.items.first)
        XCTAssertEqual(try containerPort(container, try XCTUnwrap(port["targetPort"]?.text)), 8080)

        let budget = try resource(documents, kind: "PodDisruptionBudget")
        XCTAssertEqual(budget["spec", "minAvailable"]?.text, "2")
        XCTAssertEqual(try labels(budget["spec", "selector", "matchLabels"]), podLabels)

        let redis = try resource(documents, kind: "StatefulSet")
        XCTAssertEqual(redis["spec", "replicas"]?.text, "1")
        let redisLabels = try labels(redis["spec", "template", "metadata", "labels"])
        XCTAssertEqual(try labels(resource(documents, kind: "Service", name: "redis")["spec", "selector"]), redisLabels)
        let redisArgs = try XCTUnwrap(podSpec(redis)["containers"]?.items.first?["args"]?.items.compactMap(\.text))
        XCTAssertEqual(try option("--appendonly", in: redisArgs), "yes")
        XCTAssertEqual(try option("--maxmemory-policy", in: redisArgs), "noeviction")
        XCTAssertNotNil(redis["spec", "volumeClaimTemplates"]?.items.first, "Redis data lives on a persistent volume")
    }

    func testComposeRunsRedisGatewayAndUpstreamWithTheMountedConfig() throws {
        let compose = try XCTUnwrap(try DeployFile(Self.deploy, "docker/compose.yaml").documents().first)
        let services = compose["services"]
        XCTAssertEqual(Set(services?.keys ?? []), ["redis", "gateway", "upstream"])
        let redisCommand = services?["redis", "command"]?.items.compactMap(\.text) ?? []
        XCTAssertEqual(try option("--appendonly", in: redisCommand), "yes")
        XCTAssertNotNil(services?["redis", "healthcheck", "test"], "depends_on waits for a healthy Redis")
        XCTAssertEqual(services?["gateway", "depends_on", "redis", "condition"]?.text, "service_healthy")

        let dockerfile = try String(contentsOfFile: Self.deploy + "/docker/Dockerfile", encoding: .utf8)
        let mounts = services?["gateway", "volumes"]?.items.compactMap(\.text) ?? []
        let configMount = try XCTUnwrap(mounts.first { $0.hasPrefix("./gateway.yaml:") }, "gateway.yaml is mounted: \(mounts)")
        let target = configMount.split(separator: ":").dropFirst().first.map(String.init) ?? ""
        XCTAssertTrue(configMount.hasSuffix(":ro"), "mounted read-only")
        XCTAssertTrue(dockerfile.contains("\"--config\", \"\(target)\""), "the image's CMD reads \(target)")

        let config = try GatewayConfig.load(path: Self.deploy + "/docker/gateway.yaml")
        XCTAssertTrue(config.appAttest.trustAnchor.isApple)
        XCTAssertTrue(dockerfile.contains("EXPOSE \(config.listen.port) \(config.adminListen.port)"))
        XCTAssertTrue(dockerfile.contains("http://127.0.0.1:\(config.adminListen.port)/healthz"))
        let ports = services?["gateway", "ports"]?.items.compactMap(\.text) ?? []
        XCTAssertTrue(ports.contains { $0.hasSuffix(":\(config.listen.port)") }, "the proxy port is published: \(ports)")

        let grace = try XCTUnwrap(services?["gateway", "stop_grace_period"]?.text)
        XCTAssertGreaterThan(try XCTUnwrap(Int(grace.dropLast())), 30, "stop_grace_period \(grace) exceeds the 30 s drain")
    }

    func testSystemdStopTimeoutExceedsTheDrain() throws {
        let unit = try String(contentsOfFile: Self.deploy + "/systemd/app-attest-gateway.service", encoding: .utf8)
        let settings = unit.split(separator: "\n").filter { !$0.hasPrefix("#") && $0.contains("=") }
        func value(_ name: String) -> String? {
            settings.first { $0.hasPrefix(name + "=") }.map { String($0.dropFirst(name.count + 1)) }
        }
        let drainSetting = "Environment=GATEWAY_DRAIN_SECONDS="
        let drain = try XCTUnwrap(settings.first { $0.hasPrefix(drainSetting) }.flatMap { Int($0.dropFirst(drainSetting.count)) })
        let stop = try XCTUnwrap(value("TimeoutStopSec").flatMap { Int($0) })
        XCTAssertGreaterThan(stop, drain)
        XCTAssertEqual(value("CapabilityBoundingSet"), "", "no capabilities")
        XCTAssertTrue(value("ExecStart")?.contains("--drain-seconds ${GATEWAY_DRAIN_SECONDS}") ?? false)
        let example = try String(contentsOfFile: Self.deploy + "/systemd/gateway.env.example", encoding: .utf8)
        XCTAssertTrue(example.contains("\nGATEWAY_DRAIN_SECONDS=\(drain)\n"), "the example keeps the unit's default")
    }

    func testRepositoryGatewayConfigIsValid() throws {
        let path = TestPaths.repository + "/gateway.yaml"
        XCTAssertTrue(FileManager.default.fileExists(atPath: path), "no gateway.yaml at the repository root")
        // With the demo keys `make run` makes under run/ (scripts/run.sh), in a folder of its own.
        let directory = TestPaths.temporaryDirectory("repository-config")
        try FileManager.default.copyItem(atPath: path, toPath: directory + "/gateway.yaml")
        _ = try PlayIntegrityTokenMaker(directory: directory + "/run/demo-play")
        try AppleTestKey.pem.write(toFile: directory + "/run/demo-token.pem", atomically: true, encoding: .utf8)
        let config = try GatewayConfig.load(path: directory + "/gateway.yaml")
        XCTAssertNotNil(config.playIntegrity?.localKeys, "make demo's Android step needs the local keys")
    }

    /// deploy/kubernetes-tls: deploy/kubernetes with TLS in the gateway. Its config (the certificate files where the Secret is
    /// mounted) loads as check-config loads it, and differs from the base's only in `server`.
    func testTLSVariantMountsItsSecretWhereTheConfigReadsTheCertificate() throws {
        let base = try kubernetesDocuments()
        let overlay = try kubernetesDocuments(variant: "tls")
        let kustomization = try resource(overlay, kind: "Kustomization")
        let resources = kustomization["resources"]?.items.compactMap(\.text) ?? []
        XCTAssertEqual(resources.first, "../kubernetes", "the base is the plain variant")
        let files = Set(try DeployFile.all(under: Self.deploy + "/kubernetes-tls").map(\.relativePath))
        for file in resources.dropFirst() + (kustomization["patches"]?.items.compactMap { $0["path"]?.text } ?? []) {
            XCTAssertTrue(files.contains(file), "the kustomization names \(file), which is missing")
        }
        let servicePatch = try XCTUnwrap(kustomization["patches"]?.items.first { $0["target", "kind"]?.text == "Service" }?["patch"]?.text)
        XCTAssertTrue(servicePatch.contains("port: 443, targetPort: http"), servicePatch)

        let secret = try resource(overlay, kind: "Secret")
        XCTAssertEqual(secret["type"]?.text, "kubernetes.io/tls")
        XCTAssertEqual(Set(secret["stringData"]?.keys ?? []), ["tls.crt", "tls.key"])
        let patch = try podSpec(resource(overlay, kind: "Deployment"))
        let baseDeployment = try resource(base, kind: "Deployment")
        XCTAssertEqual(try resource(overlay, kind: "Deployment")["metadata", "name"]?.text, baseDeployment["metadata", "name"]?.text)
        let volume = try XCTUnwrap(patch["volumes"]?.items.first { $0["secret", "secretName"]?.text == secret["metadata", "name"]?.text },
                                   "a volume mounts the Secret")
        let container = try XCTUnwrap(patch["containers"]?.items.first)
        XCTAssertEqual(container["name"]?.text, try podSpec(baseDeployment)["containers"]?.items.first?["name"]?.text,
                       "the patch names the base's container")
        let mount = try XCTUnwrap(container["volumeMounts"]?.items.first { $0["name"]?.text == volume["name"]?.text }?["mountPath"]?.text)
        let runAs = try podSpec(baseDeployment)["securityContext", "runAsGroup"]?.text
        XCTAssertEqual(patch["securityContext", "fsGroup"]?.text, runAs, "the non-root gateway can read the Secret's files")

        // The Secret's files, as the kubelet would mount them, and the config read as check-config reads it.
        let certificates = try TestCertificates()
        let mounted = TestPaths.temporaryDirectory("gateway-tls")
        try FileManager.default.copyItem(atPath: certificates.serverCertFile, toPath: mounted + "/tls.crt")
        try FileManager.default.copyItem(atPath: certificates.serverKeyFile, toPath: mounted + "/tls.key")
        let configMap = try resource(overlay, kind: "ConfigMap")
        XCTAssertEqual(configMap["metadata", "name"]?.text, try resource(base, kind: "ConfigMap")["metadata", "name"]?.text)
        let text = try XCTUnwrap(configMap["data", "gateway.yaml"]?.text)
        XCTAssertTrue(text.contains(mount + "/tls.crt") && text.contains(mount + "/tls.key"), "server.tls reads the mounted Secret")
        let config = try GatewayConfig.parse(yaml: text.replacingOccurrences(of: mount + "/", with: mounted + "/"),
                                             environment: ["REDIS_PASSWORD": "from-redis-auth"])
        XCTAssertNotNil(config.tls)
        let baseContainer = try XCTUnwrap(podSpec(baseDeployment)["containers"]?.items.first)
        XCTAssertEqual(config.listen.port, try containerPort(baseContainer, "http"))
        let plain = try XCTUnwrap(try resource(base, kind: "ConfigMap")["data", "gateway.yaml"]?.text)
        XCTAssertEqual(Self.settings(text, without: "server:"), Self.settings(plain, without: "server:"),
                       "the TLS variant's gateway.yaml is the base's with server.tls")
    }

    /// The lines of a YAML text that set something (comments and blank lines dropped), without the top-level `section`.
    private static func settings(_ text: String, without section: String) -> [Substring] {
        var inSection = false
        return text.split(separator: "\n").filter { line in
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.isEmpty || trimmed.hasPrefix("#") { return false }
            if !line.hasPrefix(" ") { inSection = line.hasPrefix(section) }
            return !inSection
        }
    }

    // MARK: - Reading the manifests

    /// deploy/kubernetes's manifests, or a variant's (deploy/kubernetes-<variant>, a kustomization over them).
    private func kubernetesDocuments(variant: String? = nil) throws -> [Document] {
        try DeployFile.all(under: Self.deploy + "/kubernetes" + (variant.map { "-" + $0 } ?? ""), relativeTo: Self.deploy)
            .flatMap { try $0.documents() }
    }

    private func resource(_ documents: [Document], kind: String, name: String? = nil) throws -> Document {
        try XCTUnwrap(documents.first { $0["kind"]?.text == kind && (name == nil || $0["metadata", "name"]?.text == name) },
                      "no \(kind)\(name.map { " named \($0)" } ?? "")")
    }

    private func podSpec(_ workload: Document) throws -> YAMLNode {
        try XCTUnwrap(workload["spec", "template", "spec"], "\(workload.origin): spec.template.spec")
    }

    private func containerPort(_ container: YAMLNode, _ name: String) throws -> Int {
        let port = container["ports"]?.items.first { $0["name"]?.text == name }?["containerPort"]?.text
        return try XCTUnwrap(port.flatMap { Int($0) }, "container port \(name)")
    }

    private func labels(_ node: YAMLNode?) throws -> [String: String] {
        let node = try XCTUnwrap(node, "labels")
        return Dictionary(uniqueKeysWithValues: node.keys.map { ($0, node[$0]?.text ?? "") })
    }

    /// The value after `name` in an argument list.
    private func option(_ name: String, in arguments: [String]) throws -> String {
        let index = try XCTUnwrap(arguments.firstIndex(of: name), "\(name) missing from \(arguments)")
        return try XCTUnwrap(arguments.dropFirst(index + 1).first, "\(name) has no value")
    }
}

/// One YAML file under deploy/.
private struct DeployFile {
    let path: String
    let relativePath: String

    init(_ base: String, _ relativePath: String) {
        path = base + "/" + relativePath
        self.relativePath = relativePath
    }

    static func all(under directory: String, relativeTo base: String? = nil) throws -> [DeployFile] {
        let base = base ?? directory
        let prefix = String(directory.dropFirst(base.count)).drop { $0 == "/" }
        let names = try FileManager.default.subpathsOfDirectory(atPath: directory)
        return names.filter { $0.hasSuffix(".yaml") || $0.hasSuffix(".yml") }.sorted()
            .map { DeployFile(base, prefix.isEmpty ? $0 : "\(prefix)/\($0)") }
    }

    /// The file's documents, split on lines that are exactly `---`; parts holding only comments are skipped.
    func documents() throws -> [Document] {
        let text = try String(contentsOfFile: path, encoding: .utf8)
        var parts: [[Substring]] = [[]]
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line == "---" { parts.append([]) } else { parts[parts.count - 1].append(line) }
        }
        return try parts.enumerated().compactMap { index, lines in
            let meaningful = lines.contains { line in
                let trimmed = line.trimmingCharacters(in: .whitespaces)
                return !trimmed.isEmpty && !trimmed.hasPrefix("#")
            }
            guard meaningful else { return nil }
            let origin = "deploy/\(relativePath) document \(index + 1)"
            do {
                return Document(origin: origin, root: try YAMLDocument.parse(lines.joined(separator: "\n")))
            } catch {
                XCTFail("\(origin): \(error)")
                throw error
            }
        }
    }
}

/// One parsed YAML document and where it came from.
private struct Document {
    let origin: String
    let root: YAMLNode

    subscript(_ keys: String...) -> YAMLNode? { root[keys] }
}

private extension YAMLNode {
    subscript(_ keys: String...) -> YAMLNode? { self[keys] }

    subscript(_ keys: [String]) -> YAMLNode? {
        var node: YAMLNode? = self
        for key in keys {
            guard case .mapping(let entries)? = node?.content else { return nil }
            node = entries.first { $0.key == key }?.value
        }
        return node
    }

    var text: String? {
        guard case .scalar(let text, _) = content else { return nil }
        return text
    }

    var items: [YAMLNode] {
        guard case .sequence(let items) = content else { return [] }
        return items
    }

    var keys: [String] {
        guard case .mapping(let entries) = content else { return [] }
        return entries.map(\.key)
    }
}
