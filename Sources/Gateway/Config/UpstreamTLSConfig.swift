import RedisClient
import Upstream

/// `upstreams.<name>.tls`: the same keys as `redis.tls` (`ca_file`, `cert_file`, `key_file`, `server_name`), for
/// `https://` upstreams only. Verification cannot be turned off: there is no key for it.
extension UpstreamTLSSettings {
    static func read(_ value: ConfigValue?, isHTTPS: Bool, baseDirectory: String) -> UpstreamTLSSettings? {
        guard let value, let section = value.mapping() else { return nil }
        defer { section.finish() }
        if !isHTTPS { value.invalid("tls applies to https:// upstreams only (this url is http://)") }
        let issuesBefore = section.log.issues.count
        let files = RedisTLSSettings.readFiles(section, baseDirectory: baseDirectory)
        if section.log.issues.count == issuesBefore {
            // Loaded into OpenSSL now, as redis.tls's files are, so a key that does not match its certificate (or a
            // passphrase-protected one) stops `serve` and `check-config` instead of failing every request.
            do throws(RedisTLSError) {
                _ = try RedisTLSContext(files)
            } catch {
                value.invalid(error.message)
            }
        }
        return UpstreamTLSSettings(caFile: files.caFile, certFile: files.certFile, keyFile: files.keyFile, serverName: files.serverName)
    }
}
